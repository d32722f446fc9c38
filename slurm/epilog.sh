#!/bin/sh
# Slurm Epilog for gpud: `gpudctl slurm epilog` (docs/SCALE-OUT.md). Slurm runs it with a bare
# environment; /etc/default/gpud-slurm may set GPUD_SOCKET (gpud's socket) and GPUDCTL (the
# gpudctl to run).
[ -r /etc/default/gpud-slurm ] && . /etc/default/gpud-slurm
[ -n "${GPUD_SOCKET:-}" ] && export GPUD_SOCKET
exec "${GPUDCTL:-gpudctl}" slurm epilog "$@"
