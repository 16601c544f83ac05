"""Whether a pool of Ray actors fits the running cluster, asked before Ray schedules anything: Ray waits for a pool it
cannot place without a word (a stage or source whose actors hold every CPU that its read tasks also need hangs in
`backpressured:tasks(ResourceBudget)`). The extraction stage (hsstore/ray_stage.py) and the features source
(client/training/ray_source.py) both ask here, so both refuse in one line naming what is missing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ray.data


class PoolDoesNotFit(ValueError):
    """The actor pool asks for more than the Ray cluster has: Ray would wait for it without a word."""


def runs_tasks(samples: ray.data.Dataset) -> bool:
    """Whether the samples come through Ray tasks (a read, a map: a CPU each while they run) rather than from
    blocks already in the object store (`from_items`, `from_pandas`). Ray's plan is private: where it cannot be
    read, tasks are assumed, since a CPU too few hangs and one too many only refuses a pool that would fit."""
    try:
        pending = [samples._logical_plan.dag]
        while pending:
            op = pending.pop()
            if not type(op).__name__.startswith("From"):
                return True
            pending.extend(op.input_dependencies)
    except AttributeError:
        return True
    return False


def check_fits(
    concurrency: int | tuple[int, int], num_gpus: float, num_cpus: float, tasks: bool, knob: str = "concurrency"
) -> None:
    """PoolDoesNotFit unless the running cluster can place the pool's smallest size, beside one task's CPU where the
    samples come through tasks (actors holding every CPU starve a file's reading tasks, and the stage hangs in
    `backpressured:tasks(ResourceBudget)`). A cluster not started yet is started now, as Ray Data would start it on
    first use (`ray.init()`, which honours RAY_ADDRESS): the pool is checked against the cluster it will run on.
    `knob`: the caller's name for the pool's size, as the message tells what to pass."""
    import ray

    if not ray.is_initialized():
        ray.init()
    actors = concurrency if isinstance(concurrency, int) else concurrency[0]
    have = ray.cluster_resources()
    cpus, gpus = float(have.get("CPU", 0)), float(have.get("GPU", 0))
    missing = []
    if actors * num_cpus + tasks > cpus:
        fits = int((cpus - tasks) // num_cpus) if num_cpus else actors
        reading = " and one CPU to read the samples" if tasks else ""
        missing.append(
            f"{actors} actors of {num_cpus:g} CPU{reading} need {actors * num_cpus + tasks:g} CPUs and the cluster "
            f"has {cpus:g}: " + (f"pass {knob}={fits}" if fits >= 1 else "give the cluster more CPUs")
        )
    if actors * num_gpus > gpus:
        missing.append(
            f"{actors} actors of num_gpus={num_gpus:g} need {actors * num_gpus:g} GPUs and the cluster has {gpus:g}"
            + (": on a CPU cluster pass num_gpus=0" if gpus == 0 else "")
        )
    if missing:
        raise PoolDoesNotFit("the actor pool cannot be placed: " + "; ".join(missing))
