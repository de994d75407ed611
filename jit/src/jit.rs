//! The in-process back end: compile a planned module with cranelift-jit and call it.
//!
//! This is the only place generated code is called. [`JitModule::run`] takes byte slices, checks
//! that there is one per parameter of `main` and that each is at least as large as its buffer,
//! and only then jumps into the code; the code itself never goes outside those buffers (see
//! [`crate::codegen`]), so the call is safe whatever the slices hold.
#![allow(unsafe_code)]

use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, default_libcall_names};
use heron_ir::loop_ir;

use crate::CodegenError;
use crate::codegen::{CodegenOptions, emit_module};
use crate::isa::{OptLevel, TargetCpu, build_isa};
use crate::routines::Routine;
use crate::threads::{DeviceHandle, RoutineEntry, RunContext, ThreadPool};

/// Why a run of generated code failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JitRunError {
    #[error("expected {expected} buffers, got {got}")]
    Arity { expected: usize, got: usize },
    #[error("buffer #{index} ('{name}') needs {needed} bytes, got {got}")]
    TooSmall { index: usize, name: String, needed: usize, got: usize },
    #[error("buffer #{index} ('{name}') is written by the code but was passed read-only")]
    NotWritable { index: usize, name: String },
    #[error("an index computed from tensor data was out of range in '{func}'")]
    IndexOutOfRange { func: String },
    #[error("the module's routines use {needed} device slots, the run provided {got}")]
    MissingDevices { needed: usize, got: usize },
    #[error("the code called a routine or device its run context does not provide")]
    MissingRoutine,
}

type EntryFn = extern "C" fn(*const *mut u8, *mut i32, *const RunContext);

/// One buffer handed to generated code.
pub enum JitArg<'a> {
    /// A buffer the code only reads (inputs, constant pools).
    Read(&'a [u8]),
    /// A buffer the code may write (outputs, workspace pools).
    Write(&'a mut [u8]),
}

impl JitArg<'_> {
    fn len(&self) -> usize {
        match self {
            JitArg::Read(b) => b.len(),
            JitArg::Write(b) => b.len(),
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        match self {
            // Never written through: `compile` proved no store reaches a read-only parameter.
            JitArg::Read(b) => b.as_ptr().cast_mut(),
            JitArg::Write(b) => b.as_mut_ptr(),
        }
    }
}

/// Compiled code for one planned module.
pub struct JitModule {
    /// Owns the code memory; `None` only while dropping.
    module: Option<JITModule>,
    entry: EntryFn,
    /// Byte size, name and read-only-ness of each of `main`'s parameters.
    params: Vec<(usize, String, bool)>,
    func_names: Vec<String>,
    scalar_vector_loops: Vec<String>,
    /// The registered routines, in the order the code indexes them.
    routine_table: Vec<RoutineEntry>,
    /// Device slots the registered routines take (a run must provide this many).
    device_slots: usize,
}

// SAFETY: after `finalize_definitions` the code memory is immutable and executable; the module
// is never touched again until drop. Running the code mutates only the argument buffers, which
// `run` borrows mutably, so concurrent runs on different buffers do not interact.
unsafe impl Send for JitModule {}
unsafe impl Sync for JitModule {}

/// JIT options.
#[derive(Clone, Debug, Default)]
pub struct JitOptions {
    pub opt_level: OptLevel,
    pub codegen: CodegenOptions,
    /// Precompiled routines the module may call (`call extern "name"(...)`), registered with
    /// their signature and CPU features (see [`Routine`]).
    pub routines: Vec<Routine>,
}

impl JitModule {
    /// Compiles `ir` (flat and planned, with a `main`) for this machine; `read_only` marks the
    /// parameters of `main` the code must never write.
    pub fn compile(ir: &loop_ir::Module, read_only: &[bool], options: JitOptions) -> Result<JitModule, CodegenError> {
        let main = ir.main().ok_or_else(|| CodegenError::NoFunction(loop_ir::MAIN.into()))?;
        crate::readonly::check_read_only(ir, read_only)?;
        let params = main
            .params
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                (main.buffer(p).size_bytes(), main.buffer(p).name.clone(), read_only.get(k).copied().unwrap_or(false))
            })
            .collect();
        for r in &options.routines {
            r.check_features()?;
        }
        let isa = build_isa(TargetCpu::Native, options.opt_level, false)?;
        let mut codegen = options.codegen;
        codegen.fma &= crate::isa::has_fma(&*isa);
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        for (name, f) in host_math() {
            builder.symbol(name, f);
        }
        let mut module = JITModule::new(builder);
        let signatures: Vec<_> = options.routines.iter().map(|r| r.signature.clone()).collect();
        let emitted = emit_module(&mut module, ir, "heron_entry", Linkage::Export, codegen, &signatures)?;
        module.finalize_definitions()?;
        let code = module.get_finalized_function(emitted.entry);
        // SAFETY: `code` is the entry emitted above, whose signature is
        // (pointer, pointer, pointer) -> () in the host's default calling convention.
        let entry = unsafe { std::mem::transmute::<*const u8, EntryFn>(code) };
        Ok(JitModule {
            module: Some(module),
            entry,
            params,
            func_names: emitted.func_names,
            scalar_vector_loops: emitted.scalar_vector_loops,
            routine_table: options.routines.iter().map(|r| RoutineEntry::new(&r.signature.name, r.address)).collect(),
            device_slots: crate::routines::device_slots(&signatures),
        })
    }

    /// Loops marked vectorized that were emitted as scalar code (see
    /// [`crate::EmittedModule::scalar_vector_loops`]).
    pub fn scalar_vector_loops(&self) -> &[String] {
        &self.scalar_vector_loops
    }

    /// Device slots a run must provide to [`JitModule::run_in`].
    pub fn device_slots(&self) -> usize {
        self.device_slots
    }

    /// Byte sizes of the buffers `run` takes, in order.
    pub fn param_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.params.iter().map(|p| p.0)
    }

    /// Runs `main` on `args` (one per parameter: inputs, outputs, pools; writable where
    /// `compile` was not told the parameter is read-only). Checks count, sizes and writability
    /// before the code runs; allocates nothing for up to 64 parameters. Runs on this thread.
    pub fn run<'a>(&self, args: impl IntoIterator<Item = JitArg<'a>>) -> Result<(), JitRunError> {
        self.run_in(args, None, &[])
    }

    /// [`JitModule::run`], with the parallel loops split across `pool`'s threads (results are
    /// the same with any number of threads: each output is computed by one thread, in the same
    /// order) and `devices` in the run context's device table, for the routines that take a
    /// device slot (at least [`JitModule::device_slots`] of them; the handles are passed on,
    /// never dereferenced by generated code).
    pub fn run_in<'a>(
        &self,
        args: impl IntoIterator<Item = JitArg<'a>>,
        pool: Option<&ThreadPool>,
        devices: &[DeviceHandle],
    ) -> Result<(), JitRunError> {
        if devices.len() < self.device_slots {
            return Err(JitRunError::MissingDevices { needed: self.device_slots, got: devices.len() });
        }
        const MAX_INLINE: usize = 64;
        let mut inline = [std::ptr::null_mut::<u8>(); MAX_INLINE];
        let mut spilled = Vec::new();
        let mut count = 0;
        for mut arg in args {
            let Some((needed, name, read_only)) = self.params.get(count) else {
                return Err(JitRunError::Arity { expected: self.params.len(), got: count + 1 });
            };
            if arg.len() < *needed {
                return Err(JitRunError::TooSmall {
                    index: count,
                    name: name.clone(),
                    needed: *needed,
                    got: arg.len(),
                });
            }
            if matches!(arg, JitArg::Read(_)) && !read_only {
                return Err(JitRunError::NotWritable { index: count, name: name.clone() });
            }
            if count < MAX_INLINE {
                inline[count] = arg.ptr();
            } else {
                spilled.push(arg.ptr());
            }
            count += 1;
        }
        if count != self.params.len() {
            return Err(JitRunError::Arity { expected: self.params.len(), got: count });
        }
        let ptrs: Vec<*mut u8>;
        let table: *const *mut u8 = if count <= MAX_INLINE {
            inline.as_ptr()
        } else {
            ptrs = inline.iter().copied().chain(spilled).collect();
            ptrs.as_ptr()
        };
        // Atomic: the threads of a parallel loop share the status word.
        let status = std::sync::atomic::AtomicI32::new(0);
        let context = RunContext::new(pool, &self.routine_table, devices);
        // The pointers stay valid for the call: they come from borrows that live for 'a, the
        // pool and the routine table outlive it, and the pool's workers are done when the
        // entry returns.
        (self.entry)(table, status.as_ptr(), &context);
        let status = status.into_inner();
        if status == crate::codegen::MISSING_ROUTINE {
            return Err(JitRunError::MissingRoutine);
        }
        if status != 0 {
            let func = self.func_names.get(status as usize - 1).cloned().unwrap_or_default();
            return Err(JitRunError::IndexOutOfRange { func });
        }
        Ok(())
    }
}

impl Drop for JitModule {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: `entry` is private and dies with `self`; no run can be in progress since
            // `run` borrows `self`.
            unsafe { m.free_memory() };
        }
    }
}

extern "C" fn host_exp(x: f64) -> f64 {
    x.exp()
}
extern "C" fn host_tanh(x: f64) -> f64 {
    x.tanh()
}
extern "C" fn host_erf(x: f64) -> f64 {
    heron_ir::interp::erf(x)
}
extern "C" fn host_log(x: f64) -> f64 {
    x.ln()
}
extern "C" fn host_sin(x: f64) -> f64 {
    x.sin()
}
extern "C" fn host_cos(x: f64) -> f64 {
    x.cos()
}
extern "C" fn host_tan(x: f64) -> f64 {
    x.tan()
}
extern "C" fn host_asin(x: f64) -> f64 {
    x.asin()
}
extern "C" fn host_acos(x: f64) -> f64 {
    x.acos()
}
extern "C" fn host_atan(x: f64) -> f64 {
    x.atan()
}
extern "C" fn host_sinh(x: f64) -> f64 {
    x.sinh()
}
extern "C" fn host_cosh(x: f64) -> f64 {
    x.cosh()
}
extern "C" fn host_asinh(x: f64) -> f64 {
    x.asinh()
}
extern "C" fn host_acosh(x: f64) -> f64 {
    x.acosh()
}
extern "C" fn host_atanh(x: f64) -> f64 {
    x.atanh()
}
extern "C" fn host_pow(x: f64, y: f64) -> f64 {
    x.powf(y)
}
extern "C" fn host_fmod(x: f64, y: f64) -> f64 {
    x % y
}
extern "C" fn host_fmaf(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
extern "C" fn host_fma(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}
extern "C" fn host_nearbyintf(x: f32) -> f32 {
    x.round_ties_even()
}
extern "C" fn host_nearbyint(x: f64) -> f64 {
    x.round_ties_even()
}
extern "C" fn host_floorf(x: f32) -> f32 {
    x.floor()
}
extern "C" fn host_ceilf(x: f32) -> f32 {
    x.ceil()
}
extern "C" fn host_truncf(x: f32) -> f32 {
    x.trunc()
}

/// Host implementations of the math the generated code may import: f64 exp/tanh/erf, log and
/// the trigonometric and hyperbolic functions, and the
/// libcalls Cranelift falls back to on CPUs without the matching instructions. Bound
/// explicitly, since a dlsym lookup fails when the host binary does not link libm.
fn host_math() -> [(&'static str, *const u8); 24] {
    [
        ("pow", host_pow as *const u8),
        ("fmod", host_fmod as *const u8),
        ("log", host_log as *const u8),
        ("sin", host_sin as *const u8),
        ("cos", host_cos as *const u8),
        ("tan", host_tan as *const u8),
        ("asin", host_asin as *const u8),
        ("acos", host_acos as *const u8),
        ("atan", host_atan as *const u8),
        ("sinh", host_sinh as *const u8),
        ("cosh", host_cosh as *const u8),
        ("asinh", host_asinh as *const u8),
        ("acosh", host_acosh as *const u8),
        ("atanh", host_atanh as *const u8),
        ("exp", host_exp as *const u8),
        ("tanh", host_tanh as *const u8),
        ("erf", host_erf as *const u8),
        ("fmaf", host_fmaf as *const u8),
        ("fma", host_fma as *const u8),
        ("nearbyintf", host_nearbyintf as *const u8),
        ("nearbyint", host_nearbyint as *const u8),
        ("floorf", host_floorf as *const u8),
        ("ceilf", host_ceilf as *const u8),
        ("truncf", host_truncf as *const u8),
    ]
}
