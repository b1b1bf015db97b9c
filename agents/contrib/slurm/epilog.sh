#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/cardhour.sh): report the run's end to Cardhour.
# Never fails or holds up the job: see cardhour-hook.sh.
. "$(dirname "${BASH_SOURCE[0]}")/cardhour-hook.sh" 2>/dev/null || exit 0
cardhour_report end
exit 0
