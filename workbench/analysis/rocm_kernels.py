"""ROCm's kernel names, for :func:`workbench.analysis.kernel_classes.classify` (which asks here first).

The names AMD's libraries give their kernels, as Kineto records them on ROCm (HTA's MI250 trace,
TraceLens's MI300X/MI210 traces; traces/public):

- Tensile / hipBLASLt GEMMs ``Cijk_Ailk_Bljk_<types>_…``: Tensile writes the problem type after
  the index layout, data type first: ``S`` fp32, ``D`` fp64, ``H`` fp16, ``B`` bf16, ``X`` xf32
  (MI300's tf32), ``F8``/``B8`` fp8, ``I8`` int8 (``SB`` = fp32 with beta, ``BBS_BH`` = bf16 in, bf16
  out, fp32 compute). ``_MI16x16x1`` names the MFMA instruction (matrix cores).
- MIOpen convolutions: implicit-GEMM ``igemm_{fwd,bwd,wrw}_gtc…_{fp32,fp16,bf16}_…``, ``naive_conv_…``,
  ``MIOpenConv*``/``MIOpenCvD3x3*``, the assembly ``miopenSp3AsmConv*``/``miopenGcnAsmConv*``,
  ``gridwise_convolution_implicit_gemm_*``, and the ``Im2d2Col``/``Im3d2Col`` helpers; MIOpen's
  tensor ops (``SubTensorOp*``, ``Op[1-5]dTensor*``, ``OpTensorFwdBias``, ``ScaleTensor``,
  ``SetTensor``) are elementwise, its pooling (``MIOpenPooling*``, ``mloPooling*``) a reduction.
- Attention: aotriton's ``attn_fwd``/``bwd_kernel_dk_dv``/``bwd_kernel_dq``/``bwd_preprocess``, CK's
  and aiter's ``fmha_*``/``Fmha*Kernel`` (the generic attention pattern already takes ``fmha``).
- rocPRIM/hipCUB device primitives (sort, scan, select: indexing; reduce: reduction; transform:
  elementwise).
- The HIP runtime's blit kernels ``__amd_rocclr_copyBuffer*``/``__amd_rocclr_fillBuffer*`` (copies and
  memsets done by a kernel) and roctracer's copy names ``CopyHostToDevice``, ``FillBuffer``.

RCCL keeps NCCL's kernel names (``ncclDevKernel_Generic``), which the communication pattern takes.
An fp32/fp64 GEMM is ``gemm_simt`` (the fp32 path, held to the table's fp32 figure: the MFMA fp32
peak on AMD, workbench.hardware.devices); reduced-precision ones are ``gemm_tensor_core``.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE
CIJK = re.compile(r"^Cijk_A[a-z]+_B[a-z]+_(?P<types>[A-Za-z0-9]+)_")
# the data type at the start of Tensile's type field, longest first
TENSILE_TYPES = (("F8B8", "fp8"), ("B8F8", "fp8"), ("F8", "fp8"), ("B8", "fp8"), ("4xi8", "int8"), ("I8", "int8"),
                 ("X", "tf32"), ("B", "bf16"), ("H", "fp16"), ("S", "fp32"), ("D", "fp64"), ("C", "fp32"), ("Z", "fp64"))
MIOPEN_CONV = re.compile(r"^igemm_(?:fwd|bwd|wrw)_|^naive_conv|^MIOpenCo?nv|^MIOpenCvD|^miopen\w*Conv|^gridwise_convolution"
                         r"|^Im[23]d2Col|^Col2Im[23]d|^ConvHip|^conv_(?:fwd|bwd|wrw)_", _I)
MIOPEN_TENSOR = re.compile(r"^(?:SubTensorOp|Op[1-5]dTensor|OpTensor|MIOpenScaleTensor|ScaleTensor|SetTensor|CopyTensor"
                           r"|MIOpenCopyTensor|MIOpenActiveFwd|MIOpenActiveBwd|MIOpenNeuron)", _I)
MIOPEN_POOL = re.compile(r"^(?:MIOpenPooling|mloPooling)", _I)
AOTRITON_ATTENTION = re.compile(r"^(?:attn_fwd|attn_bwd|_attn_bwd|bwd_kernel_dk_dv|bwd_kernel_dq|bwd_preprocess"
                                r"|bwd_kernel_fuse)", _I)
ROCPRIM = re.compile(r"rocprim::|hipcub::", _I)
ROCCLR_COPY = re.compile(r"^__amd_rocclr_(?:copy|gws)", _I)
ROCCLR_FILL = re.compile(r"^__amd_rocclr_(?:fill|initHeap)", _I)
ROCTRACER_COPY = re.compile(r"^Copy(Host|Device)To(Host|Device)", _I)
# name → (class, subclass), first match wins
_RULES = ((AOTRITON_ATTENTION, "attention", "flash"), (MIOPEN_POOL, "reduction", "pooling"),
          (MIOPEN_TENSOR, "elementwise", "elementwise"), (ROCCLR_COPY, "copy", "memcpy"), (ROCCLR_FILL, "copy", "memset"),
          (re.compile(r"^FillBuffer"), "copy", "memset"))
_NAME_DTYPES = ((re.compile(r"bf16|bfloat16", _I), "bf16"), (re.compile(r"fp16|half|_f16", _I), "fp16"),
                (re.compile(r"fp32|float", _I), "fp32"), (re.compile(r"int8|_i8_", _I), "int8"))


def tensile_dtype(name: str) -> str | None:
    """The data type a Tensile/hipBLASLt ``Cijk_*`` GEMM's name states; None when not one."""
    m = CIJK.match(name)
    if not m:
        return None
    types = m.group("types")
    return next((d for code, d in TENSILE_TYPES if types.startswith(code)), "")


def _gemm(dtype: str) -> tuple[str, str, str]:
    if dtype in ("fp32", "fp64"):
        return "gemm_simt", dtype, dtype
    return "gemm_tensor_core", dtype or "mfma", dtype


def classify_rocm(name: str) -> tuple[str, str, str] | None:
    """(class, subclass, dtype) of a ROCm library kernel (see the module docstring); None for any
    other name. Subclass ``mfma`` marks a matrix-core kernel whose name states no dtype: its op's
    dtype decides, and an fp32 op there ran fp32 (not NVIDIA's tf32)."""
    dtype = tensile_dtype(name)
    if dtype is not None:
        return _gemm(dtype)
    if MIOPEN_CONV.search(name):
        return _gemm(next((d for rx, d in _NAME_DTYPES if rx.search(name)), ""))
    for rx, cls, sub in _RULES:
        if rx.search(name):
            return cls, sub, ""
    m = ROCTRACER_COPY.search(name)
    if m:
        return "copy", f"memcpy_{m.group(1)[0].lower()}to{m.group(2)[0].lower()}", ""
    if ROCPRIM.search(name):
        low = name.lower()
        kind = "reduction" if "reduce" in low else "elementwise" if "transform" in low else "indexing"
        return kind, kind, ""
    return None
