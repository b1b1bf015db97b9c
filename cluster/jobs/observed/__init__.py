"""Observed usage: the processes agents see on GPUs become jobs and observed allocations (DESIGN.md §3, §4).

A periodic scan (``observed_scan``, beat task ``cluster.tasks.observed_scan``) reads the ``processes``
of stored samples and writes what they show. What it writes is a function of the stored samples, jobs
and team identities, merged into what earlier scans wrote by unions that give the same rows however
the samples are cut into scans: running it twice, or after a crash, changes nothing.

Presence
    A record covers ``[ts - interval_s, ts]``; a process listed in it was present over that range. Per
    GPU, the records listing one *identity* (its ``job_ref``; without one, its unix user) make ranges
    of presence; two ranges at most ``OBSERVED_GAP_S`` apart (a missed sample or two, a job step
    ending and the next starting) are one range. A process on a MIG instance's record belongs to that
    instance. One on a whole GPU's record that names a MIG instance (``gi_id``) belongs to the
    parent's only instance when it has one; otherwise to the parent: ``Gpu`` does not store its
    instances' ``gi_id``/``ci_id`` yet (the agents' nvml and sim backends list such processes on the
    instance's own record, so this is rare).

Known jobs
    ``job_<id>`` names the Slurm job ``<id>`` (or an array task ``<id>_<n>``), ``k8s-pod:<uid>`` the
    Kubernetes job ``<uid>``; a run of that job matches presence that overlaps its
    ``[start - gap, end + gap]`` (a running job has no end). The matched presence, clipped to the
    run's own ``[start, end]`` (a sample interval reaches a little before the start), becomes
    ``Allocation(origin=observed)`` rows of that job on that GPU with the GPU's share, merged with the
    ones it had: one row per range. The job's own fields are the scheduler's and are not changed.

Observed jobs
    Presence that matches no known run becomes a job with ``source=observed``: keyed by its
    ``job_ref`` (so one unknown Slurm job on eight GPUs, or on two nodes, is one job with eight
    allocations), or without one by ``<hostname>/<user>``. All the presence of one key, on all its
    GPUs, whose ranges are at most the gap apart is one *run*: one ``Job`` row whose start is the
    run's first sighting; a key seen again after a longer pause is a new run (a new row, like a
    requeued job). Late records that bridge two runs merge them into the earlier row. Team and project
    come from ``TeamIdentity(kind=unix_user, name=<user>)`` (the lexically first user when a run has
    several); unmapped users leave the team empty (the database allows that for observed jobs only),
    and a mapping added later fills it in. Such a job is ``running`` until its GPUs report samples
    more than the gap past its last sighting, then ``completed`` with ``end_time`` = last sighting.
    It requests nothing (``gpu_count`` 0: its allocations are what it held) and has no submit time.

    An observed job keyed ``job_<id>``/``k8s-pod:<uid>`` whose presence later turns out to belong to
    a known run (the scheduler's record arrived after the processes, e.g. a nightly sacct import) is
    taken apart by the next scan after that record is written (within ``OBSERVED_LOOKBACK_S`` of it)
    and its presence handed to the known job, so no job-time is held by two jobs.

Allocation ends
    An observed allocation always has an end: the last moment it was seen (a running job's grows with
    each scan). Usage is counted for what was observed, never up to "now".

Counting (for accounting): a job is counted once, by :func:`counted_allocations`: its placed
    scheduler allocations if it has any, else its observed ones, else its unplaced one. The unplaced
    row is kept rather than replaced: the scheduler's way in (``job_upsert``) would recreate it, and it
    stays the job's record of what was requested.

What is scanned
    ``ObservedScanState`` keeps, per node, the newest sample time the last scan read; the next scan
    starts ``OBSERVED_OVERLAP_S`` before it (a node never scanned: ``OBSERVED_LOOKBACK_S`` before its
    newest sample). A node's samples arrive in time order, so this reads every new record; an explicit
    ``start``/``end`` rescans any window (after importing history) and moves no watermark.

Concurrency: one scan at a time (a transaction-scoped advisory lock; a second scan meanwhile does
nothing), and every write in that one transaction.

The modules: ``scan.py`` runs the scan and writes jobs and allocations; ``presence.py`` reads what the
samples show (and what a scan takes back) and splits it between known runs and observed keys;
``ranges.py`` holds the pure range arithmetic both use.
"""
