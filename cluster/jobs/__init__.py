"""What ran on the GPUs: jobs and their allocations from scheduler hooks, CSV and sacct imports, and from
the processes the agents see; job KPIs, pages and API."""
