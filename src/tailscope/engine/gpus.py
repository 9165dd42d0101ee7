"""GPU catalog: memory, HBM bandwidth, dense tensor throughput and interconnect, each with its source.

Throughput figures are *dense* (no 2:4 sparsity): datasheets print the sparse figure, often twice as large, next to
it, and for several Blackwell parts only the sparse one (then the dense value is half of it, as NVIDIA's footnotes
say). Users add accelerators in a YAML file, read by :func:`tailscope.io.gpus.load_gpu_file`::

    gpus:
      - id: my-gpu
        memory_gb: 96            # decimal GB as CUDA reports them (or memory_gib: 90 for binary GiB)
        hbm_gbps: 4000
        bf16_tflops: 800
        fp8_tflops: 1600        # optional; omitted = no FP8 tensor cores
        fp4_tflops: 3200        # optional; omitted = no FP4 tensor cores
        interconnect_gbps: 450  # optional; per-direction bandwidth between GPUs of one NVLink domain
        nvlink_domain: 8        # optional; GPUs that share that fabric (8 for an HGX board, 72 for NVL72)
        source: "vendor datasheet URL"

Ids are lowercase with dashes (``h100-sxm``); the names other tools use (AIConfigurator's ``h100_sxm``,
``b200_sxm``, ``gb200``) are accepted as aliases.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        fp4_tflops: dense FP4 (NVFP4/MXFP4) tensor throughput, TFLOP/s; None = no FP4 tensor cores (FP4 weights
            are dequantised and multiplied at the FP8 or BF16 rate).
        nvlink_domain: GPUs reachable over ``interconnect_gbps`` (an HGX board: 8; GB200/GB300 NVL72: 72). Groups
            larger than that communicate over the scale-out network (``scaleout_gbps``).
        scaleout_gbps: per-GPU bandwidth between NVLink domains (one 400 Gb/s NIC per GPU = 50 GB/s).
        aliases: other names accepted for this GPU.
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
    fp4_tflops: float | None = None
    nvlink_domain: int = 8
    scaleout_gbps: float = 50.0
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> float:
        """Device memory as CUDA reports it (what ``gpu_memory_utilization`` multiplies), bytes."""
        return self.memory_gb * (2**30 if self.memory_binary else GB)

    def peak_flops(self, compute_dtype: str) -> float:
        """Dense FLOP/s for matmuls in ``compute_dtype`` (fp4 falls back to fp8, fp8 to bf16, without the units)."""
        if compute_dtype == "fp4" and self.fp4_tflops:
            return self.fp4_tflops * 1e12
        if compute_dtype in ("fp4", "fp8") and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12

    def link_gbps(self, group: int) -> float:
        """Per-GPU bandwidth of one GPU's own link for a collective over ``group`` GPUs: NVLink within the domain,
        its scale-out NIC beyond (what an all-to-all's traffic to other domains crosses)."""
        return self.interconnect_gbps if group <= self.nvlink_domain else self.scaleout_gbps

    def allreduce_gbps(self, group: int) -> float:
        """Bus bandwidth of a ring all-reduce over ``group`` GPUs, GB/s: NVLink within the domain; beyond it the
        rings run one channel per GPU's NIC (NCCL's rail-aligned rings), so the ``domain`` NICs of a domain carry
        its traffic in parallel — ``domain × scaleout_gbps``, at most NVLink's (two HGX H100 boards with a
        400 Gb/s NIC per GPU: 8 × 50 = 400 GB/s, against 50 GB/s if each ring hop crossed a NIC)."""
        if group <= self.nvlink_domain:
            return self.interconnect_gbps
        return min(self.interconnect_gbps, self.nvlink_domain * self.scaleout_gbps)


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
        aliases=("h100_sxm", "h100"),
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
        aliases=("h200_sxm", "h200-sxm"),
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
        "36 PF sparse / 8 / 2, FP8 72 PF sparse / 8 / 2, FP4 144 PF sparse = 72 PF dense / 8, NVLink5 1.8 TB/s "
        "bidirectional",
        fp4_tflops=9000,
        aliases=("b200_sxm", "b200-sxm"),
    ),
    GpuSpec(
        "b300",
        "NVIDIA B300 / Blackwell Ultra (HGX) 288GB",
        288,
        8000,
        2250,
        4500,
        900,
        "NVIDIA HGX B300 spec (nvidia.com/en-us/data-center/hgx): 2.3 TB HBM3e / 8 GPUs = 288 GB, 8 TB/s per GPU, "
        "FP16/BF16 36 PF sparse / 8 / 2, FP8 72 PF sparse / 8 / 2, FP4 105 PF dense / 8 (≈ 13.1 PF; 144 PF sparse), "
        "NVLink5 1.8 TB/s bidirectional",
        fp4_tflops=13125,
        aliases=("b300_sxm", "b300-sxm"),
    ),
    GpuSpec(
        "gb200",
        "NVIDIA GB200 NVL72 (Blackwell GPU, per GPU) 186GB",
        186,
        8000,
        2500,
        5000,
        900,
        "NVIDIA GB200 NVL72 spec (nvidia.com/en-us/data-center/gb200-nvl72): 72 GPUs, 13.4 TB HBM3e / 72 = 186 GB, "
        "576 TB/s / 72 = 8 TB/s, FP16/BF16 360 PF sparse / 72 / 2 = 2.5 PF, FP8 720 PF sparse / 72 / 2 = 5 PF, "
        "FP4 1,440 PF sparse / 72 / 2 = 10 PF dense, NVLink5 130 TB/s / 72 = 1.8 TB/s bidirectional per GPU",
        fp4_tflops=10000,
        nvlink_domain=72,
        aliases=("gb200_nvl72", "gb200-nvl72"),
    ),
    GpuSpec(
        "gb300",
        "NVIDIA GB300 NVL72 (Blackwell Ultra GPU, per GPU) 279GB",
        279,
        8000,
        2500,
        5000,
        900,
        "NVIDIA GB300 NVL72 spec (nvidia.com/en-us/data-center/gb300-nvl72): 72 GPUs, 20 TB HBM3e / 72 = 279 GB, "
        "576 TB/s / 72 = 8 TB/s, FP16/BF16 360 PF sparse / 72 / 2 = 2.5 PF, FP8 720 PF sparse / 72 / 2 = 5 PF, "
        "FP4 1,080 PF dense / 72 = 15 PF, NVLink5 130 TB/s / 72 = 1.8 TB/s bidirectional per GPU",
        fp4_tflops=15000,
        nvlink_domain=72,
        aliases=("gb300_nvl72", "gb300-nvl72"),
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
    table: dict[str, GpuSpec] = {}
    for g in gpus:
        for alias in g.aliases:
            table[alias.lower()] = g
    for g in gpus:  # ids win over aliases
        table[g.id] = g
    return table


def gpu_ids() -> list[str]:
    """Catalog ids in catalog order."""
    return [g.id for g in GPUS]


def resolve_gpu(ref: str, extra: tuple[GpuSpec, ...] = ()) -> GpuSpec:
    """The GPU called ``ref`` (an id or alias) among the catalog and ``extra`` (user entries win).

    Raises:
        CatalogError: listing the known ids.
    """
    table = {**_index(GPUS), **_index(extra)}
    try:
        return table[ref.lower()]
    except KeyError:
        ids = [g.id for g in (*GPUS, *extra)]
        raise CatalogError(
            f"GPU {ref!r} is not in the catalog; use one of {', '.join(dict.fromkeys(ids))} or add it with "
            "--gpu-file FILE"
        ) from None
