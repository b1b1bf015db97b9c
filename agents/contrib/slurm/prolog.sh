#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/cardhour.sh): report the run's start to Cardhour.
# Never fails or holds up the job: see cardhour-hook.sh.
. "$(dirname "${BASH_SOURCE[0]}")/cardhour-hook.sh" 2>/dev/null || exit 0
cardhour_report start
exit 0
