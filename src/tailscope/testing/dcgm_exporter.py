"""A scripted DCGM exporter: ``/metrics`` in the text format NVIDIA's dcgm-exporter writes, with known values.

For the telemetry tests (``bench --telemetry-url``): per GPU a utilisation, framebuffer used/free (MiB), DRAM-active
ratio, power (W) and a total-energy counter (mJ) that grows at ``power_w`` per second from the exporter's start — so a
test knows the energy a run should see. ``node=True`` adds the node exporter's ``node_cpu_seconds_total`` with a
``cpu_busy`` share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from tailscope.serve.site import serve_site
from tailscope.testing.background import BackgroundServer


@dataclass(slots=True)
class DcgmConfig:
    """What the exporter reports (the same for every GPU)."""

    gpus: int = 1
    util_pct: float = 85.0
    fb_used_mib: float = 60_000.0
    fb_free_mib: float = 20_000.0
    dram_active: float = 0.55
    power_w: float = 400.0
    node: bool = False
    cpu_busy: float = 0.25
    model_name: str = "NVIDIA H100 80GB HBM3"


def dcgm_text(cfg: DcgmConfig, elapsed_s: float) -> str:
    """One scrape's body."""
    lines: list[str] = []
    energy_mj = 1_000_000_000 + cfg.power_w * elapsed_s * 1000.0
    fields = (
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", f"{cfg.util_pct:g}"),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", f"{cfg.fb_used_mib:g}"),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", f"{cfg.fb_free_mib:g}"),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active.",
         f"{cfg.dram_active:g}"),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", f"{cfg.power_w:g}"),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
         f"{energy_mj:.0f}"),
    )  # fmt: skip
    for name, kind, help_text, value in fields:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for g in range(cfg.gpus):
            labels = (
                f'gpu="{g}",UUID="GPU-{g:08d}-0000-0000-0000-000000000000",device="nvidia{g}",'
                f'modelName="{cfg.model_name}",Hostname="gpu-host"'
            )
            lines.append(f"{name}{{{labels}}} {value}")
    if cfg.node:
        lines.append("# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.")
        lines.append("# TYPE node_cpu_seconds_total counter")
        lines.append(f'node_cpu_seconds_total{{cpu="0",mode="idle"}} {1000 + elapsed_s * (1 - cfg.cpu_busy):.3f}')
        lines.append(f'node_cpu_seconds_total{{cpu="0",mode="user"}} {500 + elapsed_s * cfg.cpu_busy:.3f}')
    return "\n".join(lines) + "\n"


class DcgmExporter(BackgroundServer):
    """The exporter in a background thread on 127.0.0.1 and a free port; ``url`` is its ``/metrics``.

    Use as a context manager; ``scrapes`` counts the requests it answered.
    """

    what = "scripted DCGM exporter"

    def __init__(self, cfg: DcgmConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or DcgmConfig()
        self.scrapes = 0
        self.started = time.monotonic()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    async def _metrics(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        body = dcgm_text(self.cfg, time.monotonic() - self.started)
        return web.Response(text=body, content_type="text/plain", charset="utf-8")

    async def _run_server(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self.port = await serve_site(runner, "127.0.0.1", 0)
        self.started = time.monotonic()
        await self._until_stopped()
        await runner.cleanup()
