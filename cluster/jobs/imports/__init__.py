"""Jobs from files: the generic jobs CSV (DESIGN.md §3, ``jobs_csv.py``) and Slurm's sacct output
(``sacct.py``), through what both share (``shared.py``).

A file is read into ``JobInput`` records, the very records ``job_upsert`` takes (teams, projects, GPU
models and GPUs resolved), checked by the same rules (``JobInput.problems()``, plus the column limits
the database would refuse), then written set-based by ``cluster.jobs.write.jobs_write`` rather than by
one ``job_upsert`` per row, which costs several queries a job. Both give the same rows (tested).

- nothing is created for a rejected row: teams, projects and GPU models a row names are made only
  when the row is written (``Lookups.save_new``).
- rows are applied in file order, as upserting them one by one would be: of two rows of one run the
  later wins, and a started row adopts the run's pending row (job_upsert's rules); a row whose
  effect a later row replaces counts as skipped.
"""
