#!/bin/bash
# Shared by prolog.sh and epilog.sh: report a Slurm job's run to Cardhour (POST /api/v1/jobs/).
#
# A hook must never hold up or fail a job: every failure is logged and the hook exits 0; curl gets
# a short timeout. The run is keyed by (source, job_id, start_time), so a repeated POST changes
# nothing and the epilog's POST updates the prolog's row: both send the same start time.
#
# Settings come from the environment or from $CARDHOUR_HOOK_CONFIG (default
# /etc/cardhour/slurm-hook.env, root-only: it holds the token):
#   CARDHOUR_URL          e.g. https://cardhour.example.org (required)
#   CARDHOUR_TOKEN        a service token (required)
#   CARDHOUR_TIMEOUT      seconds for the whole request (default 5)
#   CARDHOUR_STATE_DIR    where the prolog leaves what it sent for the epilog (default /run/cardhour-slurm)
#   CARDHOUR_CPU_JOBS     1 to report jobs without GPUs too (default 0)

CARDHOUR_HOOK_CONFIG=${CARDHOUR_HOOK_CONFIG:-/etc/cardhour/slurm-hook.env}
# shellcheck disable=SC1090
[ -r "$CARDHOUR_HOOK_CONFIG" ] && . "$CARDHOUR_HOOK_CONFIG"
CARDHOUR_TIMEOUT=${CARDHOUR_TIMEOUT:-5}
CARDHOUR_STATE_DIR=${CARDHOUR_STATE_DIR:-/run/cardhour-slurm}
PATH=${PATH:-/usr/bin:/bin}:/usr/bin:/bin  # Slurm runs prologs with no search path

cardhour_log() {
    echo "cardhour-slurm: $*" >&2
    command -v logger >/dev/null 2>&1 && logger -t cardhour-slurm -- "$*" 2>/dev/null
    return 0
}

# A JSON string literal: backslash, quote and control characters escaped.
json_str() {
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\r'/\\r}
    s=${s//$'\t'/\\t}
    printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}

# Host names of a Slurm host list ("gpu[01-03,07],login1"), one a line; scontrol when there is one.
expand_hosts() {
    if command -v scontrol >/dev/null 2>&1; then
        timeout 2 scontrol show hostnames "$1" 2>/dev/null && return
    fi
    local list=$1 item="" depth=0 i c
    for ((i = 0; i <= ${#list}; i++)); do
        c=${list:i:1}
        [ "$c" = "[" ] && depth=$((depth + 1))
        [ "$c" = "]" ] && depth=$((depth - 1))
        if { [ "$c" = "," ] && [ $depth -eq 0 ]; } || [ $i -eq ${#list} ]; then
            _expand_one "$item"
            item=""
        else
            item+=$c
        fi
    done
}

_expand_one() {
    local item=$1 prefix ranges suffix part lo hi n
    [ -z "$item" ] && return
    if [[ $item =~ ^([^\[]*)\[([0-9,-]+)\](.*)$ ]]; then
        prefix=${BASH_REMATCH[1]} ranges=${BASH_REMATCH[2]} suffix=${BASH_REMATCH[3]}
        IFS=, read -ra parts <<<"$ranges"
        for part in "${parts[@]}"; do
            lo=${part%-*} hi=${part#*-}
            for ((n = 10#$lo; n <= 10#$hi; n++)); do
                printf '%s%0*d%s\n' "$prefix" "${#lo}" "$n" "$suffix"
            done
        done
    else
        echo "$item"
    fi
}

# The job id as sacct writes it: array tasks 123_4, heterogeneous components 123+0.
cardhour_job_id() {
    if [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
        echo "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
    elif [ -n "${SLURM_HET_JOB_ID:-}" ] && [ -n "${SLURM_HET_JOB_OFFSET:-}" ]; then
        echo "${SLURM_HET_JOB_ID}+${SLURM_HET_JOB_OFFSET}"
    else
        echo "${SLURM_JOB_ID:-}"
    fi
}

# The run's start as epoch seconds: Slurm's own start time (the one sacct reports later), else, in
# the prolog only, now (the epilog then reuses what the prolog sent).
cardhour_start_epoch() {
    local phase=$1 start
    if [ -n "${SLURM_JOB_START_TIME:-}" ]; then
        echo "$SLURM_JOB_START_TIME"
        return 0
    fi
    if command -v scontrol >/dev/null 2>&1; then
        start=$(timeout 3 scontrol show job -o "${SLURM_JOB_ID}" 2>/dev/null | grep -o 'StartTime=[0-9T:-]*' | head -1)
        start=${start#StartTime=}
        if [ -n "$start" ] && date -d "$start" +%s >/dev/null 2>&1; then
            date -d "$start" +%s
            return 0
        fi
    fi
    [ "$phase" = start ] && date +%s
}

# The run's JSON fields but its state and end (no braces), or status 1 when there is nothing to report.
cardhour_fields() {
    local job_id=$1 phase=$2 gpus count nodes first node_count start_epoch fields
    # This node's GPUs: Slurm's GRES indices, which are NVML indices when gres.conf lists the devices
    # in order (AutoDetect=nvml does). Anything else (UUIDs) leaves the run unplaced.
    gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
    [[ $gpus =~ ^[0-9]+(,[0-9]+)*$ ]] || gpus=""
    count=0
    [ -n "$gpus" ] && count=$(($(tr -cd , <<<"$gpus" | wc -c) + 1))
    [ "$count" -eq 0 ] && [ "${CARDHOUR_CPU_JOBS:-0}" != 1 ] && return 1
    # Every node of a job runs the hooks; one row per run holds one node's GPUs, so a multi-node job
    # is reported once, by its first node, unplaced (its GPUs counted as this node's times the nodes).
    nodes=$(expand_hosts "${SLURM_JOB_NODELIST:-${SLURMD_NODENAME:-}}")
    first=$(head -n 1 <<<"$nodes")
    node_count=${SLURM_JOB_NUM_NODES:-$(grep -c . <<<"$nodes")}
    if [ "${node_count:-1}" -gt 1 ]; then
        [ -n "$first" ] && [ "$first" != "${SLURMD_NODENAME:-}" ] && return 1
        count=$((count * node_count))
        gpus=""
    fi
    start_epoch=$(cardhour_start_epoch "$phase")
    if [ -z "$start_epoch" ]; then
        cardhour_log "job $job_id: start time unknown (no SLURM_JOB_START_TIME, no scontrol): not reported"
        return 1
    fi
    fields="\"source\":\"slurm\",\"job_id\":$(json_str "$job_id")"
    fields+=",\"user\":$(json_str "${SLURM_JOB_USER:-}"),\"account\":$(json_str "${SLURM_JOB_ACCOUNT:-}")"
    fields+=",\"partition\":$(json_str "${SLURM_JOB_PARTITION:-}")"
    [ -n "${SLURM_JOB_NAME:-}" ] && fields+=",\"name\":$(json_str "$SLURM_JOB_NAME")"
    fields+=",\"start_time\":\"$(date -u -d "@$start_epoch" +%Y-%m-%dT%H:%M:%SZ)\""
    if [ -n "$gpus" ]; then
        fields+=",\"node\":$(json_str "${SLURMD_NODENAME:-$first}"),\"gpu_indices\":$(json_str "$gpus")"
    fi
    printf '%s' "$fields,\"gpu_count\":\"$count\""
}

# cardhour_report start|end
cardhour_report() {
    local phase=$1 job_id saved fields body work status rc code
    if [ -z "${CARDHOUR_URL:-}" ] || [ -z "${CARDHOUR_TOKEN:-}" ]; then
        cardhour_log "CARDHOUR_URL or CARDHOUR_TOKEN not set ($CARDHOUR_HOOK_CONFIG): job ${SLURM_JOB_ID:-?} not reported"
        return 0
    fi
    job_id=$(cardhour_job_id)
    [ -z "$job_id" ] && { cardhour_log "no SLURM_JOB_ID: nothing to report"; return 0; }
    # The epilog sends what the prolog sent (the same key, the same GPUs), plus the end.
    saved="$CARDHOUR_STATE_DIR/${job_id//\//_}.fields"
    if [ "$phase" = end ] && [ -r "$saved" ]; then
        fields=$(cat "$saved")
    else
        fields=$(cardhour_fields "$job_id" "$phase") || return 0
    fi
    if [ "$phase" = start ]; then
        body="{$fields,\"state\":\"running\"}"
        mkdir -p "$CARDHOUR_STATE_DIR" 2>/dev/null && printf '%s' "$fields" >"$saved" 2>/dev/null
    else
        # Only EpilogSlurmctld knows the exit code; without it the run is "completed" until an
        # import_sacct of the same run sets Slurm's final state.
        code=${SLURM_JOB_DERIVED_EC:-${SLURM_JOB_EXIT_CODE2:-0}}
        if [ "${code%%:*}" = 0 ]; then body="{$fields,\"state\":\"completed\""; else body="{$fields,\"state\":\"failed\""; fi
        body+=",\"end_time\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
    fi

    # The token travels in a header file, never on the command line (ps would show it).
    work=$(mktemp -d 2>/dev/null) || { cardhour_log "no temporary directory: job $job_id not reported"; return 0; }
    chmod 700 "$work"
    printf 'Authorization: Bearer %s\n' "$CARDHOUR_TOKEN" >"$work/headers"
    printf '%s' "$body" >"$work/body"
    status=$(curl --silent --show-error --output "$work/answer" --write-out '%{http_code}' \
        --connect-timeout 2 --max-time "$CARDHOUR_TIMEOUT" -X POST \
        -H "@$work/headers" -H 'Content-Type: application/json' \
        --data-binary "@$work/body" "${CARDHOUR_URL%/}/api/v1/jobs/" 2>"$work/error")
    rc=$?
    if [ $rc -ne 0 ] || [ "${status:0:1}" != 2 ]; then
        cardhour_log "job $job_id $phase not reported (curl exit $rc, HTTP ${status:-none}): $(head -c 300 "$work/error" "$work/answer" 2>/dev/null | tr '\n' ' ')"
    fi
    [ "$phase" = end ] && rm -f "$saved"
    rm -rf "$work"
    return 0
}
