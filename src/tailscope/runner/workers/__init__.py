"""A bench run spread over load-generator workers (local processes or Ray actors); :mod:`.driver` is the entry point.

:mod:`.driver` (the run: preflight, schedule, start barrier, records, store), :mod:`.partition` (the schedule split),
:mod:`.wire` (msgpack messages), :mod:`.handles` (a worker as seen by the driver: a local process),
:mod:`.ray_actors` (a worker as a Ray actor), :mod:`.worker` (one worker's load generator) and :mod:`.report` (what
each worker did and whether it limited the run). Kept empty so a worker process imports only what it runs.
"""
