"""GPU catalog: memory, HBM bandwidth, dense tensor throughput and interconnect, each with its source.

Throughput figures are *dense* (no 2:4 sparsity), as the datasheets print them next to the sparse ones. Users add
accelerators in a YAML file (:func:`load_gpu_file`)::

    gpus:
      - id: my-gpu
        memory_gb: 96            # decimal GB as CUDA reports them (or memory_gib: 90 for binary GiB)
        hbm_gbps: 4000
        bf16_tflops: 800
        fp8_tflops: 1600        # optional; omitted = no FP8 tensor cores
        interconnect_gbps: 450  # optional; per-direction bandwidth between GPUs of one node
        source: "vendor datasheet URL"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailscope.errors import CatalogError

GB = 1e9


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator.

    Attributes:
        id: lowercase catalog id.
        name: marketing name.
        memory_gb: device memory in GB (10⁹ bytes).
        hbm_gbps: peak memory bandwidth, GB/s.
        bf16_tflops: dense BF16/FP16 tensor throughput, TFLOP/s.
        fp8_tflops: dense FP8 tensor throughput, TFLOP/s; None = no FP8 tensor cores (FP8 weights are upcast).
        interconnect_gbps: per-direction GPU-to-GPU bandwidth used by tensor-parallel all-reduce, GB/s.
        source: where the numbers come from.
        memory_binary: ``memory_gb`` is really GiB (2³⁰ bytes), as for HBM parts: an "80 GB" H100 reports
            81,559 MiB to CUDA, and vLLM sizes the KV cache from what CUDA reports. GDDR cards (L4, L40S, A10G)
            report decimal GB.
    """

    id: str
    name: str
    memory_gb: float
    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    interconnect_gbps: float
    source: str
    memory_binary: bool = True

    @property
    def memory_bytes(self) -> float:
        """Device memory as CUDA reports it (what ``gpu_memory_utilization`` multiplies), bytes."""
        return self.memory_gb * (2**30 if self.memory_binary else GB)

    def peak_flops(self, compute_dtype: str) -> float:
        """Dense FLOP/s for matmuls in ``compute_dtype`` (fp8 falls back to bf16 without FP8 units)."""
        if compute_dtype == "fp8" and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12


_NV = "https://resources.nvidia.com/en-us-tensor-core"  # NVIDIA datasheet hub

GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "a100-40gb",
        "NVIDIA A100 40GB SXM",
        40,
        1555,
        312,
        None,
        300,
        "NVIDIA A100 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): 1,555 GB/s, BF16 312 TF dense, NVLink 600 GB/s",
    ),
    GpuSpec(
        "a100-80gb",
        "NVIDIA A100 80GB SXM",
        80,
        2039,
        312,
        None,
        300,
        "NVIDIA A100 datasheet (same PDF): 80GB SXM 2,039 GB/s, BF16 312 TF dense, NVLink 600 GB/s bidirectional",
    ),
    GpuSpec(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        80,
        3350,
        989.4,
        1978.9,
        450,
        "NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): 3.35 TB/s, BF16 1,979 TF sparse = 989 dense, "
        "FP8 3,958 sparse = 1,979 dense, NVLink 900 GB/s bidirectional",
    ),
    GpuSpec(
        "h100-pcie",
        "NVIDIA H100 PCIe/NVL 80GB",
        80,
        2000,
        756,
        1513,
        64,
        "NVIDIA H100 datasheet (H100 PCIe column): 2 TB/s, BF16 1,513 sparse = 756 dense, FP8 3,026 sparse = "
        "1,513 dense, PCIe Gen5 128 GB/s bidirectional",
    ),
    GpuSpec(
        "h200",
        "NVIDIA H200 SXM 141GB",
        141,
        4800,
        989.4,
        1978.9,
        450,
        "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): 141 GB, 4.8 TB/s, BF16 1,979 sparse, FP8 "
        "3,958 sparse, NVLink 900 GB/s",
    ),
    GpuSpec(
        "b200",
        "NVIDIA B200 (HGX) 180GB",
        180,
        8000,
        2250,
        4500,
        900,
        "NVIDIA HGX B200 spec (nvidia.com/en-us/data-center/hgx): 1.44 TB / 8 GPUs, 64 TB/s / 8, FP16/BF16 "
        "36 PF sparse / 8 / 2, FP8 72 PF sparse / 8 / 2, NVLink5 1.8 TB/s bidirectional",
    ),
    GpuSpec(
        "l4",
        "NVIDIA L4 24GB",
        24,
        300,
        121,
        242.5,
        32,
        "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4): 300 GB/s, BF16 242 TF sparse = 121 dense, FP8 "
        "485 sparse = 242.5 dense, PCIe Gen4 x16 64 GB/s bidirectional",
        memory_binary=False,
    ),
    GpuSpec(
        "l40s",
        "NVIDIA L40S 48GB",
        48,
        864,
        362.05,
        733,
        32,
        "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): 864 GB/s, BF16 733 TF sparse = 362 dense, "
        "FP8 1,466 sparse = 733 dense, PCIe Gen4 x16",
        memory_binary=False,
    ),
    GpuSpec(
        "a10g",
        "NVIDIA A10G 24GB (AWS G5)",
        24,
        600,
        70,
        None,
        32,
        "AWS EC2 G5 / NVIDIA A10G: 24 GB GDDR6, 600 GB/s, ~70 TF dense FP16/BF16 tensor (A10G runs at lower "
        "clocks than the A10's 125 TF); PCIe Gen4",
        memory_binary=False,
    ),
    GpuSpec(
        "mi300x",
        "AMD Instinct MI300X 192GB",
        192,
        5300,
        1307.4,
        2614.9,
        448,
        "AMD Instinct MI300X datasheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html): 192 GB "
        "HBM3, 5.3 TB/s, BF16 1,307.4 TF dense, FP8 2,614.9 TF dense, Infinity Fabric 896 GB/s aggregate",
    ),
    GpuSpec(
        "rtx-4090",
        "NVIDIA GeForce RTX 4090 24GB",
        24,
        1008,
        165.2,
        330.3,
        32,
        "NVIDIA Ada Lovelace architecture whitepaper v1.1, Appendix (RTX 4090): 1,008 GB/s, FP16/BF16 tensor "
        "with FP32 accumulate 165.2 TF dense, FP8 330.3 TF dense; PCIe Gen4, no NVLink",
    ),
)


def _index(gpus: tuple[GpuSpec, ...]) -> dict[str, GpuSpec]:
    return {g.id: g for g in gpus}


def gpu_ids() -> list[str]:
    """Catalog ids in catalog order."""
    return [g.id for g in GPUS]


def _spec_from_mapping(item: Any, where: str) -> GpuSpec:
    if not isinstance(item, dict):
        raise CatalogError(f"{where}: each GPU must be a mapping with id, memory_gb, hbm_gbps, bf16_tflops")
    try:
        gid = str(item["id"]).lower()
        fp8 = item.get("fp8_tflops")
        binary = "memory_gib" in item
        spec = GpuSpec(
            id=gid,
            name=str(item.get("name", gid)),
            memory_gb=float(item["memory_gib"] if binary else item["memory_gb"]),
            hbm_gbps=float(item["hbm_gbps"]),
            bf16_tflops=float(item["bf16_tflops"]),
            fp8_tflops=float(fp8) if fp8 is not None else None,
            interconnect_gbps=float(item.get("interconnect_gbps", 32)),
            source=str(item.get("source", where)),
            memory_binary=binary,
        )
    except KeyError as exc:
        raise CatalogError(
            f"{where}: GPU entry lacks {exc.args[0]!r} (need id, memory_gb, hbm_gbps, bf16_tflops)"
        ) from None
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{where}: GPU entry has a non-numeric value ({exc})") from None
    for name in ("memory_gb", "hbm_gbps", "bf16_tflops", "interconnect_gbps"):
        if getattr(spec, name) <= 0:
            raise CatalogError(f"{where}: GPU {gid!r} {name} must be > 0")
    return spec


def load_gpu_file(path: str | Path) -> tuple[GpuSpec, ...]:
    """Read extra GPUs from a YAML file with a top-level ``gpus:`` list.

    Raises:
        CatalogError: naming the file and the problem.
    """
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CatalogError(f"{p}: GPU file not found") from None
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"{p}: cannot read GPU YAML ({exc})") from None
    items = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise CatalogError(f"{p}: expected a top-level 'gpus:' list")
    return tuple(_spec_from_mapping(it, f"{p}: gpus[{i}]") for i, it in enumerate(items))


def resolve_gpu(ref: str, extra: tuple[GpuSpec, ...] = ()) -> GpuSpec:
    """The GPU called ``ref`` among the catalog and ``extra`` (user entries win).

    Raises:
        CatalogError: listing the known ids.
    """
    table = {**_index(GPUS), **_index(extra)}
    try:
        return table[ref.lower()]
    except KeyError:
        raise CatalogError(
            f"GPU {ref!r} is not in the catalog; use one of {', '.join(table)} or add it with a GPU YAML file"
        ) from None
