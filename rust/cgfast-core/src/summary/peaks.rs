//! Vendor peak throughput per GPU and dtype, keyed by the device name a trace records
//! (`deviceProperties[].name`).
//!
//! Dense figures (without structured sparsity) from the NVIDIA datasheets: H100 Tensor
//! Core GPU (SXM and PCIe), H200 Tensor Core GPU, A100 Tensor Core GPU (40 GB and 80 GB
//! SXM), L4 Tensor Core GPU, L40S GPU, and HGX B200 (per GPU: the 8-GPU figures / 8,
//! sparse tensor figures halved). `fp32` is the non-tensor-core FP32 rate; `tf32`,
//! `bf16` (= FP16) and `fp8` are tensor-core rates.

/// Which peak a kernel's FLOPs are measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DtypeClass {
    /// bfloat16 and float16 on tensor cores: the default for kernels that say no dtype.
    Bf16,
    /// TensorFloat-32 on tensor cores.
    Tf32,
    /// float32 on the CUDA cores.
    Fp32,
    /// 8-bit floats on tensor cores.
    Fp8,
}

impl DtypeClass {
    /// Kernels without a `dtype` are measured against this.
    pub const DEFAULT: DtypeClass = DtypeClass::Bf16;

    /// The class of a `dtype` as traces and annotations write it (`torch.bfloat16`,
    /// `bf16`, `float32`, ...); `None`: no peak for it in the table.
    pub fn of(dtype: &str) -> Option<DtypeClass> {
        let d = dtype.trim().to_ascii_lowercase();
        let d = d.strip_prefix("torch.").unwrap_or(&d);
        Some(match d {
            "bfloat16" | "bf16" | "float16" | "fp16" | "half" => DtypeClass::Bf16,
            "tf32" | "tensorfloat32" => DtypeClass::Tf32,
            "float32" | "fp32" | "float" => DtypeClass::Fp32,
            _ if d.starts_with("float8") || d.starts_with("fp8") => DtypeClass::Fp8,
            _ => return None,
        })
    }

    /// How the output names it.
    pub fn name(self) -> &'static str {
        match self {
            DtypeClass::Bf16 => "bf16",
            DtypeClass::Tf32 => "tf32",
            DtypeClass::Fp32 => "fp32",
            DtypeClass::Fp8 => "fp8",
        }
    }
}

/// One GPU's peaks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuPeaks {
    /// The name the output gives it.
    pub gpu: &'static str,
    pub bf16_tflops: f64,
    pub tf32_tflops: f64,
    pub fp32_tflops: f64,
    /// `None`: no FP8 tensor cores.
    pub fp8_tflops: Option<f64>,
    /// Memory bandwidth, in GB/s (10⁹ bytes per second).
    pub gbps: f64,
}

impl GpuPeaks {
    /// The peak for `class`, in TFLOP/s.
    pub fn tflops(&self, class: DtypeClass) -> Option<f64> {
        match class {
            DtypeClass::Bf16 => Some(self.bf16_tflops),
            DtypeClass::Tf32 => Some(self.tf32_tflops),
            DtypeClass::Fp32 => Some(self.fp32_tflops),
            DtypeClass::Fp8 => self.fp8_tflops,
        }
    }
}

const fn gpu(gpu: &'static str, bf16: f64, tf32: f64, fp32: f64, fp8: Option<f64>, gbps: f64) -> GpuPeaks {
    GpuPeaks { gpu, bf16_tflops: bf16, tf32_tflops: tf32, fp32_tflops: fp32, fp8_tflops: fp8, gbps }
}

/// (what the device name must contain, case-insensitively: every part; its peaks), the
/// more specific first.
const TABLE: &[(&[&str], GpuPeaks)] = &[
    (&["h100", "pcie"], gpu("H100 PCIe", 756.0, 378.0, 51.0, Some(1513.0), 2000.0)),
    (&["h100", "nvl"], gpu("H100 NVL", 835.5, 417.5, 60.0, Some(1670.5), 3900.0)),
    (&["h100"], gpu("H100 SXM", 989.4, 494.7, 67.0, Some(1978.9), 3350.0)),
    (&["h200"], gpu("H200", 989.4, 494.7, 67.0, Some(1978.9), 4800.0)),
    (&["a100", "40gb"], gpu("A100 40GB", 312.0, 156.0, 19.5, None, 1555.0)),
    (&["a100", "80gb", "pcie"], gpu("A100 80GB PCIe", 312.0, 156.0, 19.5, None, 1935.0)),
    (&["a100", "80gb"], gpu("A100 80GB SXM", 312.0, 156.0, 19.5, None, 2039.0)),
    (&["l40s"], gpu("L40S", 362.05, 183.0, 91.6, Some(733.0), 864.0)),
    (&["l4"], gpu("L4", 121.0, 60.0, 30.3, Some(242.5), 300.0)),
    (&["b200"], gpu("B200", 2250.0, 1125.0, 75.0, Some(4500.0), 8000.0)),
];

/// The peaks of the GPU a trace names (`NVIDIA H100 80GB HBM3`, `NVIDIA A100-SXM4-40GB`, ...).
pub fn of_device(name: &str) -> Option<GpuPeaks> {
    let name = name.to_ascii_lowercase();
    // "L4" must not match "L40S" (taken first) nor a word it is part of.
    let words: Vec<&str> = name.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    TABLE
        .iter()
        .find(|(parts, _)| {
            parts.iter().all(|p| if *p == "l4" { words.contains(p) } else { name.contains(p) })
        })
        .map(|(_, peaks)| *peaks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_as_traces_record_them() {
        let gpu_of = |n: &str| of_device(n).map(|p| p.gpu);
        assert_eq!(gpu_of("NVIDIA H100 80GB HBM3"), Some("H100 SXM"));
        assert_eq!(gpu_of("NVIDIA H100 PCIe"), Some("H100 PCIe"));
        assert_eq!(gpu_of("NVIDIA H200"), Some("H200"));
        assert_eq!(gpu_of("NVIDIA A100-SXM4-80GB"), Some("A100 80GB SXM"));
        assert_eq!(gpu_of("NVIDIA A100-SXM4-40GB"), Some("A100 40GB"));
        assert_eq!(gpu_of("NVIDIA A100-PCIE-40GB"), Some("A100 40GB"));
        assert_eq!(gpu_of("NVIDIA L4"), Some("L4"));
        assert_eq!(gpu_of("NVIDIA L40S"), Some("L40S"));
        assert_eq!(gpu_of("NVIDIA B200"), Some("B200"));
        assert_eq!(gpu_of("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(gpu_of("NVIDIA L40"), None);
    }

    #[test]
    fn dtypes_as_torch_writes_them() {
        assert_eq!(DtypeClass::of("torch.bfloat16"), Some(DtypeClass::Bf16));
        assert_eq!(DtypeClass::of("float16"), Some(DtypeClass::Bf16));
        assert_eq!(DtypeClass::of("torch.float32"), Some(DtypeClass::Fp32));
        assert_eq!(DtypeClass::of("tf32"), Some(DtypeClass::Tf32));
        assert_eq!(DtypeClass::of("torch.float8_e4m3fn"), Some(DtypeClass::Fp8));
        assert_eq!(DtypeClass::of("torch.int64"), None);
        let a100 = of_device("NVIDIA A100-SXM4-80GB").unwrap();
        assert_eq!((a100.tflops(DtypeClass::Fp32), a100.tflops(DtypeClass::Fp8)), (Some(19.5), None));
    }
}
