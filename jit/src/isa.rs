//! Target ISAs: the host's (features detected by cranelift-native) or a named x86-64 level for
//! objects that must run elsewhere.

use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};

use crate::CodegenError;

/// How hard Cranelift optimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OptLevel {
    /// No optimisation: instructions stay in source order, but nothing is hoisted out of loops.
    None,
    /// E-graph optimisation with loop-invariant code motion; measured faster on every
    /// reference model (the index arithmetic of inner loops moves out).
    #[default]
    Speed,
}

/// Which CPU the code is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TargetCpu {
    /// The machine compiling (JIT default).
    #[default]
    Native,
    /// x86-64 with SSE4.1 (portable objects).
    X86_64Baseline,
    /// x86-64-v2: SSE4.2, POPCNT.
    X86_64V2,
    /// x86-64-v3: AVX2, FMA, BMI.
    X86_64V3,
}

impl TargetCpu {
    pub fn parse(s: &str) -> Option<TargetCpu> {
        Some(match s {
            "native" => TargetCpu::Native,
            "x86-64" | "baseline" => TargetCpu::X86_64Baseline,
            "x86-64-v2" => TargetCpu::X86_64V2,
            "x86-64-v3" => TargetCpu::X86_64V3,
            _ => return None,
        })
    }
}

/// An ISA for `cpu`; `pic` for objects that go into shared libraries or PIE executables.
pub fn build_isa(cpu: TargetCpu, opt: OptLevel, pic: bool) -> Result<OwnedTargetIsa, CodegenError> {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v).map_err(|e| CodegenError::Isa(format!("{k}={v}: {e}")))
    };
    set(&mut flags, "opt_level", if opt == OptLevel::Speed { "speed" } else { "none" })?;
    set(&mut flags, "is_pic", if pic { "true" } else { "false" })?;
    // Generated code only calls back into the host through absolute addresses.
    set(&mut flags, "use_colocated_libcalls", "false")?;
    // Our input is verified loop IR; the Cranelift verifier would double compile time.
    set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
    let flags = settings::Flags::new(flags);
    let builder = match cpu {
        TargetCpu::Native => cranelift_native::builder().map_err(|e| CodegenError::Isa(e.to_string()))?,
        _ => {
            let mut b =
                isa::lookup_by_name("x86_64-unknown-linux-gnu").map_err(|e| CodegenError::Isa(e.to_string()))?;
            let mut features = vec!["has_sse3", "has_ssse3", "has_sse41"];
            if matches!(cpu, TargetCpu::X86_64V2 | TargetCpu::X86_64V3) {
                features.extend(["has_sse42", "has_popcnt"]);
            }
            if cpu == TargetCpu::X86_64V3 {
                features.extend(["has_avx", "has_avx2", "has_fma", "has_bmi1", "has_bmi2", "has_lzcnt"]);
            }
            for f in features {
                b.enable(f).map_err(|e| CodegenError::Isa(format!("{f}: {e}")))?;
            }
            b
        }
    };
    builder.finish(flags).map_err(|e| CodegenError::Isa(e.to_string()))
}

/// Whether the ISA has fused multiply-add (otherwise F32X4 fma becomes libcalls).
pub fn has_fma(isa: &dyn isa::TargetIsa) -> bool {
    isa.isa_flags().iter().any(|f| f.name == "has_fma" && f.as_bool().unwrap_or(false))
}
