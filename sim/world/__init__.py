"""The simulation: clients, coordinators and partition logs on one event-time clock.

What lives here: the public face of the simulated world, :class:`Simulator` and
:class:`SimConfig` with :func:`simulate` / :func:`iter_events` (defined in
:mod:`.simulator`, with the model and its races). The drivers it is made of,
one module each: :mod:`.schedule` (heap, latency, output clock: the shared
base), :mod:`.lifecycle` (processes start, close, crash, pause),
:mod:`.heartbeats` (KIP-848 members), :mod:`.commits` (offset commits),
:mod:`.rebalances` (classic groups), :mod:`.scenarios` (per-group
scenarios) and :mod:`.cluster` (offset expiration, partition leadership).
"""

from fencewatch.sim.world.schedule import SimGroup
from fencewatch.sim.world.simulator import DEFAULT_START_TS, Done, SimConfig, Simulator, iter_events, simulate

__all__ = ["DEFAULT_START_TS", "Done", "SimConfig", "SimGroup", "Simulator", "iter_events", "simulate"]
