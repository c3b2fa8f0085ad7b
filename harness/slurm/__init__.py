"""Slurm, with no luigi: render a stage's job script, submit it, watch it, cancel it.

tasks/slurm/submit.py decides which stage goes to Slurm and what the job runs; this package only
talks to Slurm's commands (sbatch, squeue, scontrol, scancel), so it works wherever they do.
"""
from harness.slurm.jobs import (
           JobError,
           allocation_nodes,
           JobSpec,
           SlurmJob,
           cancel,
           ended_error,
           job_lines,
           job_state,
           node_address,
           node_names,
           render_script,
           srun_argv,
           submit,
           wait_ended,
)
from harness.slurm.oci import Container, check_bundle, check_bundle_here, container_of

__all__ = ["Container", "check_bundle", "check_bundle_here", "container_of", "JobError", "allocation_nodes", "JobSpec", "SlurmJob", "cancel", "ended_error", "job_lines", "job_state",
           "node_address", "node_names", "render_script", "srun_argv", "submit", "wait_ended"]
