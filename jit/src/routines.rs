//! Precompiled routines generated code calls (`call extern "name"(...)` in loop IR): the hook
//! for kernels that are not generated, such as hand-written AVX-512 microkernels. A routine is
//! registered with its C signature and the CPU features it needs; generated code calls it
//! through the run context's routine table (`call_indirect`), so the JIT and AOT share one call
//! sequence and no relocation depends on where the routine lives.

use crate::CodegenError;

/// One argument of a routine's C signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutineParam {
    /// A pointer to a buffer's first element.
    Buffer,
    /// `int64_t` (every integer argument).
    I64,
    F32,
    F64,
    /// The device handle in this slot of the run context's device table ([`DeviceHandle`]):
    /// supplied by the run, not by the call site, whose arguments skip it.
    ///
    /// [`DeviceHandle`]: crate::threads::DeviceHandle
    Device(u32),
}

/// A routine's name and C signature (`void name(params...)`), as code generation sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutineSignature {
    pub name: String,
    pub params: Vec<RoutineParam>,
}

/// How many device slots a run must provide for code that may call `routines`.
pub fn device_slots(routines: &[RoutineSignature]) -> usize {
    let slots = routines.iter().flat_map(|r| &r.params).filter_map(|p| match p {
        RoutineParam::Device(slot) => Some(*slot as usize + 1),
        _ => None,
    });
    slots.max().unwrap_or(0)
}

/// A routine ready to be called: signature, required CPU features and address.
#[derive(Clone, Debug)]
pub struct Routine {
    pub signature: RoutineSignature,
    /// CPU features the routine needs (`sse4.1`, `avx`, `avx2`, `fma`, `avx512f`, `avx512bw`,
    /// `avx512vl`, `avx512vnni`, `avxvnni`); compiling a module that calls it on a CPU without
    /// one of them is an error.
    pub features: Vec<String>,
    /// The `extern "C"` function. It is trusted to stay inside the buffers it is given.
    pub address: *const u8,
}

impl Routine {
    /// Checks that this CPU has every feature the routine needs.
    pub fn check_features(&self) -> Result<(), CodegenError> {
        for feature in &self.features {
            match host_has(feature) {
                Some(true) => {}
                Some(false) => {
                    return Err(CodegenError::Isa(format!(
                        "routine '{}' needs {feature}, which this CPU lacks",
                        self.signature.name
                    )));
                }
                None => {
                    return Err(CodegenError::Isa(format!(
                        "routine '{}' names unknown CPU feature '{feature}'",
                        self.signature.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether this CPU has `feature` (`None`: not a feature name this knows).
fn host_has(feature: &str) -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        Some(match feature {
            "sse4.1" => std::is_x86_feature_detected!("sse4.1"),
            "avx" => std::is_x86_feature_detected!("avx"),
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "fma" => std::is_x86_feature_detected!("fma"),
            "avx512f" => std::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
            "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
            "avx512vnni" => std::is_x86_feature_detected!("avx512vnni"),
            "avxvnni" => std::is_x86_feature_detected!("avxvnni"),
            _ => return None,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        None
    }
}
