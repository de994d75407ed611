//! Loop IR to Cranelift IR, generic over [`cranelift_module::Module`] (JIT and object files).
//!
//! Every `PrimFunc` becomes a local function taking one pointer per buffer parameter plus a
//! pointer to a status word (and, with a parallel loop, the `lo, hi` slice of that loop's
//! iterations to run); the exported entry takes a pointer to an array holding `main`'s buffer
//! pointers (inputs, outputs, pools, in `main`'s parameter order), the status pointer and the
//! run context ([`crate::threads::RunContext`], or null: everything on the calling thread).
//! `main` calls a function with a parallel loop through the context's `parallel_for` and the
//! function's task trampoline (`task(argv, status, lo, hi)`).
//! Pool views (`DeclPoolBuffer`) are pool base + byte offset; loop-local accumulators live in
//! registers (Cranelift variables) or, when indexed dynamically, in stack slots. Accesses whose
//! index cannot be proven in range (e.g. indices loaded from a tensor) are checked at run time:
//! out of range, the status word gets the function's number and the access goes to element 0,
//! so generated code never touches memory outside its buffers.

use std::collections::HashMap;

/// The status a run ends with when code calls a routine its run context does not provide (no
/// context, or tables without the routine or a device slot it takes).
pub const MISSING_ROUTINE: i32 = -1;

use cranelift_codegen::Context;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I64};
use cranelift_codegen::ir::{
    AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, Type, UserFuncName,
    Value,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{FuncId, Linkage, Module};
use heron_ir::DType;
use heron_ir::loop_ir::analysis::VarRanges;
use heron_ir::loop_ir::{
    self, Arg, BinOp, BufferId, Callee, CmpOp, Expr, ForKind, MAIN, MathOp, PrimFunc, Scope, Stmt, VarId,
};

use heron_ir::loop_ir::analysis::affine_terms;

use crate::CodegenError;
use crate::math;
use crate::routines::{RoutineParam, RoutineSignature};
use crate::threads::{RoutineEntry, routine_id};

/// Code generation choices.
#[derive(Clone, Copy, Debug)]
pub struct CodegenOptions {
    /// Emit loops marked vectorized with 128-bit SIMD (otherwise they run scalar).
    pub vectorize: bool,
    /// Contract `a * b + c` in vector code into fused multiply-adds (needs an ISA with FMA;
    /// results then differ from separate rounding by at most an ulp per step).
    pub fma: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions { vectorize: true, fma: false }
    }
}

/// What [`emit_module`] declared.
#[derive(Clone, Debug)]
pub struct EmittedModule {
    /// `entry(args: *const *mut u8, status: *mut i32, context: *const RunContext)`.
    pub entry: FuncId,
    /// Number of pointers `args` must hold (`main`'s parameters).
    pub num_args: usize,
    /// Names of the functions, by status code - 1.
    pub func_names: Vec<String>,
    /// Loops the target marked vectorized (or unrolled over a vectorized loop) that the vector
    /// emitter could not take and emitted as scalar code, as `function: loop %var`.
    pub scalar_vector_loops: Vec<String>,
}

/// Host functions generated code may call (f64 math only; f32 math is inline). The JIT binds
/// them to Rust; objects import them from libm.
/// Two-argument f64 host functions (`f(x, y)`).
pub const LIBM2_IMPORTS: [&str; 2] = ["pow", "fmod"];

pub const LIBM_IMPORTS: [&str; 15] = [
    "exp", "tanh", "erf", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
];

/// Emits every function of `ir` (a flat, planned module with a `main`) into `module`, plus the
/// entry `entry_name` with `entry_linkage`.
///
/// `routines` are the precompiled routines the module may call (`call extern`), in the order of
/// the run context's routine table; a call of another routine, or with other argument types,
/// is an error.
pub fn emit_module<M: Module>(
    module: &mut M,
    ir: &loop_ir::Module,
    entry_name: &str,
    entry_linkage: Linkage,
    options: CodegenOptions,
    routines: &[RoutineSignature],
) -> Result<EmittedModule, CodegenError> {
    let main = ir.main().ok_or_else(|| CodegenError::NoFunction(MAIN.into()))?;
    let ptr = module.target_config().pointer_type();
    // Functions identical but for their names (a chain of 100,000 equal reshapes, the repeated
    // blocks of a network) are emitted once; the others call that one.
    let mut first_of: HashMap<String, usize> = HashMap::new();
    let mut emitted_as: Vec<usize> = Vec::with_capacity(ir.funcs.len());
    for (k, f) in ir.funcs.iter().enumerate() {
        let key = if f.name == MAIN { MAIN.to_string() } else { structure_key(f) };
        emitted_as.push(*first_of.entry(key).or_insert(k));
    }
    let mut ids = HashMap::new();
    // Functions with a parallel loop: their task trampoline and the loop's extent.
    let mut tasks: HashMap<String, (FuncId, i64)> = HashMap::new();
    for (k, f) in ir.funcs.iter().enumerate() {
        let parallel = parallel_extent(f);
        let (id, task) = if emitted_as[k] == k {
            let sig = func_signature(module, f, ptr);
            let id = module.declare_function(&format!("{entry_name}__{}", f.name), Linkage::Local, &sig)?;
            let task = match parallel {
                Some(_) => Some(module.declare_function(
                    &format!("{entry_name}__{}__task", f.name),
                    Linkage::Local,
                    &task_signature(module, ptr),
                )?),
                None => None,
            };
            (id, task)
        } else {
            let first = &ir.funcs[emitted_as[k]].name;
            (ids[first], tasks.get(first).map(|t| t.0))
        };
        ids.insert(f.name.clone(), id);
        if let (Some(task), Some(extent)) = (task, parallel) {
            tasks.insert(f.name.clone(), (task, extent));
        }
    }
    let mut libm = HashMap::new();
    for name in LIBM_IMPORTS {
        let mut sig = module.make_signature();
        sig.params.push(AbiParam::new(F64));
        sig.returns.push(AbiParam::new(F64));
        libm.insert(name, module.declare_function(name, Linkage::Import, &sig)?);
    }
    let mut libm2 = HashMap::new();
    for name in LIBM2_IMPORTS {
        let mut sig = module.make_signature();
        sig.params.extend([AbiParam::new(F64), AbiParam::new(F64)]);
        sig.returns.push(AbiParam::new(F64));
        libm2.insert(name, module.declare_function(name, Linkage::Import, &sig)?);
    }
    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut scalar_vector_loops = Vec::new();
    for (index, f) in ir.funcs.iter().enumerate() {
        if emitted_as[index] != index {
            continue;
        }
        let table = f.name == MAIN;
        ctx.func.signature = func_signature(module, f, ptr);
        ctx.func.name = UserFuncName::user(0, ids[&f.name].as_u32());
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            // Only what the function calls: declaring every function in every function would
            // make code generation quadratic in the number of operators.
            let mut refs = HashMap::new();
            let mut task_refs = HashMap::new();
            for callee in called(f) {
                let Callee::Func(name) = &callee else { continue };
                let key = name.clone();
                let id = *ids.get(name).ok_or_else(|| CodegenError::NoFunction(key.clone()))?;
                refs.insert(key.clone(), module.declare_func_in_func(id, b.func));
                if let Some(&(task, extent)) = tasks.get(&key) {
                    task_refs.insert(key, (module.declare_func_in_func(task, b.func), extent));
                }
            }
            let libm = libm.iter().map(|(&n, &id)| (n, module.declare_func_in_func(id, b.func))).collect();
            let libm2 = libm2.iter().map(|(&n, &id)| (n, module.declare_func_in_func(id, b.func))).collect();
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let params = b.block_params(entry).to_vec();
            let (status, context) =
                if table { (params[1], params[2]) } else { (params[f.params.len()], params[f.params.len() + 1]) };
            let callees = Callees { funcs: refs, tasks: task_refs, libm, libm2, routines };
            let mut t = FuncTranslator::new(b, f, ptr, index as i64 + 1, (status, context), callees, options);
            for (k, &p) in f.params.iter().enumerate() {
                t.bufs[p.0 as usize] = if table { Buf::Arg(k) } else { Buf::Ptr(params[k]) };
            }
            if table {
                t.table = Some(params[0]);
            } else if parallel_extent(f).is_some() {
                t.slice = Some((params[f.params.len() + 2], params[f.params.len() + 3]));
            }
            t.prepare_locals();
            t.stmt(&f.body)?;
            scalar_vector_loops.append(&mut t.scalar_vector_loops);
            let mut b = t.b;
            b.ins().return_(&[]);
            b.seal_all_blocks();
            b.finalize(module.target_config());
        }
        define(module, ids[&f.name], &mut ctx, &f.name)?;
        if let Some(&(task, _)) = tasks.get(&f.name) {
            emit_task(module, &mut ctx, &mut fctx, task, ids[&f.name], f, ptr)?;
        }
    }
    // The entry: hand the argument array, status word and context to main.
    let entry_sig = func_signature(module, main, ptr);
    let entry = module.declare_function(entry_name, entry_linkage, &entry_sig)?;
    ctx.func.signature = entry_sig;
    ctx.func.name = UserFuncName::user(0, entry.as_u32());
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let main_ref = module.declare_func_in_func(ids[MAIN], b.func);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        let params = b.block_params(block).to_vec();
        b.ins().call(main_ref, &params);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    define(module, entry, &mut ctx, entry_name)?;
    Ok(EmittedModule {
        entry,
        num_args: main.params.len(),
        scalar_vector_loops,
        func_names: {
            let mut copies = vec![0usize; ir.funcs.len()];
            emitted_as.iter().for_each(|&e| copies[e] += 1);
            (0..ir.funcs.len())
                .map(|k| {
                    let (name, n) = (&ir.funcs[emitted_as[k]].name, copies[emitted_as[k]]);
                    if n > 1 { format!("{name} (or one of {} identical operators)", n - 1) } else { name.clone() }
                })
                .collect()
        },
    })
}

/// What makes two functions the same code: everything but the names of the function, its
/// buffers and its variables.
fn structure_key(f: &PrimFunc) -> String {
    let mut anonymous = f.clone();
    anonymous.name.clear();
    anonymous.buffers.iter_mut().for_each(|b| b.name.clear());
    anonymous.vars.iter_mut().for_each(|v| v.name.clear());
    format!("{anonymous:?}")
}

/// The constant extent of `f`'s parallel loop, when it has one (the verifier allows one, with
/// a constant extent, outside `main`).
pub fn parallel_extent(f: &PrimFunc) -> Option<i64> {
    let mut found = None;
    f.body.walk(&mut |s| {
        if let Stmt::For { kind: ForKind::Parallel, extent, .. } = s {
            found = found.or(extent.as_int());
        }
    });
    found
}

/// `f`'s signature: a pointer per buffer parameter, the status word and the run context, and
/// with a parallel loop the `lo, hi` slice of it to run; `main` instead takes the argument
/// table (a model with thousands of inputs and outputs must not make a function with thousands
/// of parameters), the status word and the run context.
fn func_signature<M: Module>(module: &M, f: &PrimFunc, ptr: Type) -> Signature {
    let mut sig = module.make_signature();
    let pointers = if f.name == MAIN { 3 } else { f.params.len() + 2 };
    sig.params.extend((0..pointers).map(|_| AbiParam::new(ptr)));
    if f.name != MAIN && parallel_extent(f).is_some() {
        sig.params.extend([AbiParam::new(I64), AbiParam::new(I64)]);
    }
    sig
}

/// `task(argv, status, context, lo, hi)` ([`crate::threads::TaskFn`]).
fn task_signature<M: Module>(module: &M, ptr: Type) -> Signature {
    let mut sig = module.make_signature();
    sig.params.extend([ptr, ptr, ptr, I64, I64].map(AbiParam::new));
    sig
}

/// `parallel_for(context, task, argv, status, extent)` ([`crate::threads::ParallelForFn`]).
fn parallel_for_signature(b: &FunctionBuilder<'_>, ptr: Type) -> Signature {
    let mut sig = Signature::new(b.func.signature.call_conv);
    sig.params.extend([ptr, ptr, ptr, ptr, I64].map(AbiParam::new));
    sig
}

/// The task trampoline of `f`: loads `f`'s buffer pointers from `argv` and calls it.
fn emit_task<M: Module>(
    module: &mut M,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    task: FuncId,
    func: FuncId,
    f: &PrimFunc,
    ptr: Type,
) -> Result<(), CodegenError> {
    ctx.func.signature = task_signature(module, ptr);
    ctx.func.name = UserFuncName::user(0, task.as_u32());
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
        let callee = module.declare_func_in_func(func, b.func);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        let params = b.block_params(block).to_vec();
        let (argv, status, context, lo, hi) = (params[0], params[1], params[2], params[3], params[4]);
        let mut args = Vec::with_capacity(f.params.len() + 4);
        for k in 0..f.params.len() {
            let offset = i32::try_from(k * ptr.bytes() as usize)
                .map_err(|_| CodegenError::Unsupported { func: f.name.clone(), what: format!("{k} parameters") })?;
            args.push(b.ins().load(ptr, MemFlagsData::trusted(), argv, offset));
        }
        args.extend([status, context, lo, hi]);
        b.ins().call(callee, &args);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    define(module, task, ctx, &format!("{}__task", f.name))
}

/// Every function `f` calls, once each.
fn called(f: &PrimFunc) -> Vec<Callee> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    f.body.walk(&mut |s| {
        if let Stmt::Evaluate(call) = s
            && seen.insert(call.callee.clone())
        {
            out.push(call.callee.clone());
        }
    });
    out
}

fn define<M: Module>(module: &mut M, id: FuncId, ctx: &mut Context, name: &str) -> Result<(), CodegenError> {
    module.define_function(id, ctx).map_err(|e| CodegenError::Cranelift(format!("function '{name}': {e:?}")))?;
    module.clear_context(ctx);
    Ok(())
}

/// The Cranelift type holding values of `dtype` in registers (bool as 0/1 in a byte; f16 as an
/// f32 holding an f16 value, rounded after every operation like the interpreter does).
pub fn clif_type(dtype: DType) -> Option<Type> {
    Some(match dtype {
        DType::F32 | DType::F16 => F32,
        DType::F64 => F64,
        DType::I8 | DType::U8 | DType::Bool => I8,
        DType::I16 | DType::U16 => I16,
        DType::I32 | DType::U32 => I32,
        DType::I64 | DType::U64 => I64,
    })
}

/// Where a buffer's elements are.
#[derive(Clone, Debug)]
pub(crate) enum Buf {
    NotDeclared,
    Ptr(Value),
    /// A loop-local buffer indexed only by constants: one variable per element.
    Vars(Vec<Variable>),
    /// `main`'s parameter `k`, loaded from the argument table where it is used, so that a main
    /// handling thousands of tensors keeps no pointer alive across its calls.
    Arg(usize),
    /// `offset` bytes into `main`'s parameter `pool` (a planned tensor), computed where used.
    View {
        pool: usize,
        offset: i64,
    },
}

pub(crate) struct FuncTranslator<'a> {
    pub b: FunctionBuilder<'a>,
    pub f: &'a PrimFunc,
    pub ptr: Type,
    pub bufs: Vec<Buf>,
    pub vars: Vec<Option<Variable>>,
    pub ranges: VarRanges,
    /// Loop nesting depth at which each variable was last defined (for ordering index sums).
    depth_of: HashMap<VarId, usize>,
    depth: usize,
    /// Variables currently holding `base + offset` (jammed copies): (that value, base, offset).
    offset_vars: HashMap<VarId, (Value, Value, i64)>,
    pub status: Value,
    /// `main`'s argument table.
    table: Option<Value>,
    /// The run context (null: parallel loops on this thread, no routines).
    context: Value,
    /// The `lo, hi` slice of the parallel loop this call runs.
    slice: Option<(Value, Value)>,
    /// Loops marked vectorized that had to be emitted as scalar code.
    scalar_vector_loops: Vec<String>,
    code: i64,
    callees: Callees<'a>,
    pub options: CodegenOptions,
}

/// What a function can call: the module's functions by name, and the libm imports.
struct Callees<'r> {
    funcs: HashMap<String, FuncRef>,
    /// The routine table's order and signatures.
    routines: &'r [RoutineSignature],
    /// Task trampolines and parallel extents of the callees with a parallel loop.
    tasks: HashMap<String, (FuncRef, i64)>,
    libm: HashMap<&'static str, FuncRef>,
    libm2: HashMap<&'static str, FuncRef>,
}

impl<'a> FuncTranslator<'a> {
    fn new(
        b: FunctionBuilder<'a>,
        f: &'a PrimFunc,
        ptr: Type,
        code: i64,
        (status, context): (Value, Value),
        callees: Callees<'a>,
        options: CodegenOptions,
    ) -> Self {
        FuncTranslator {
            b,
            f,
            ptr,
            bufs: vec![Buf::NotDeclared; f.buffers.len()],
            vars: vec![None; f.vars.len()],
            ranges: VarRanges::new(f.vars.len()),
            depth_of: HashMap::new(),
            offset_vars: HashMap::new(),
            depth: 0,
            status,
            table: None,
            context,
            slice: None,
            scalar_vector_loops: Vec::new(),
            code,
            callees,
            options,
        }
    }

    pub fn unsupported(&self, what: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported { func: self.f.name.clone(), what: what.into() }
    }

    pub fn ty(&self, dtype: DType) -> Result<Type, CodegenError> {
        clif_type(dtype).ok_or_else(|| self.unsupported(format!("dtype {dtype}")))
    }

    /// Declares Cranelift variables for the scalar variables (their types are known up front).
    fn prepare_locals(&mut self) {
        for (k, v) in self.f.vars.iter().enumerate() {
            if let Some(ty) = clif_type(v.dtype) {
                self.vars[k] = Some(self.b.declare_var(ty));
            }
        }
    }

    pub fn var(&self, v: VarId) -> Result<Variable, CodegenError> {
        self.vars[v.0 as usize].ok_or_else(|| self.unsupported(format!("variable of dtype {}", self.f.var(v).dtype)))
    }

    /// The pointer to a buffer's first element.
    pub fn buffer_ptr(&mut self, id: BufferId) -> Result<Value, CodegenError> {
        match self.bufs[id.0 as usize] {
            Buf::Ptr(p) => Ok(p),
            Buf::Arg(k) => self.table_entry(k),
            Buf::View { pool, offset } => {
                let base = self.table_entry(pool)?;
                Ok(self.b.ins().iadd_imm_s(base, offset))
            }
            Buf::Vars(_) => Err(self.unsupported(format!("passing register buffer '{}'", self.f.buffer(id).name))),
            Buf::NotDeclared => Err(self.unsupported(format!("use of undeclared buffer '{}'", self.f.buffer(id).name))),
        }
    }

    /// Entry `k` of main's argument table.
    fn table_entry(&mut self, k: usize) -> Result<Value, CodegenError> {
        let table = self.table.ok_or_else(|| self.unsupported("an argument table outside main"))?;
        let offset = k
            .checked_mul(self.ptr.bytes() as usize)
            .and_then(|o| i32::try_from(o).ok())
            .ok_or_else(|| self.unsupported(format!("{k} arguments")))?;
        Ok(self.b.ins().load(self.ptr, MemFlagsData::trusted(), table, offset))
    }

    /// Row-major linear index of an access, as an expression.
    pub fn linear_index(&self, id: BufferId, indices: &[Expr]) -> Expr {
        let shape = &self.f.buffer(id).shape;
        let mut lin: Option<Expr> = None;
        for (k, ix) in indices.iter().enumerate() {
            let term = match lin {
                None => ix.clone(),
                Some(l) => {
                    Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, l, Expr::index(shape[k] as i64)), ix.clone())
                }
            };
            lin = Some(term);
        }
        lin.unwrap_or(Expr::index(0))
    }

    /// Address of element `indices` of a pointer buffer, range-checked when not provable.
    pub fn address(&mut self, id: BufferId, indices: &[Expr]) -> Result<Value, CodegenError> {
        let base = self.buffer_ptr(id)?;
        let buf = self.f.buffer(id);
        // Proofs rest on the element count computed with checked arithmetic, never a wrapped
        // or saturated one.
        let len = heron_ir::limits::checked_elements(&buf.shape)
            .filter(|&n| n <= i64::MAX as usize)
            .ok_or_else(|| self.unsupported(format!("buffer '{}' of {:?} elements", buf.name, buf.shape)))?
            as i128;
        let elem = buf.dtype.size_bytes() as i64;
        if len == 0 {
            // No index is valid, and the fallback element 0 does not exist either: the access
            // records the error and goes to a scratch slot instead of past the buffer.
            let code = self.b.ins().iconst(I32, self.code);
            self.record_status(code);
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 4));
            return Ok(self.b.ins().stack_addr(self.ptr, slot, 0));
        }
        let lin = self.linear_index(id, indices);
        let proven = self.ranges.range(&lin).is_some_and(|(lo, hi)| lo >= 0 && hi < len);
        if proven && let Some((terms, constant)) = affine_terms(&lin) {
            let terms: Vec<(VarId, i64)> = terms.into_iter().filter(|&(_, c)| c != 0).collect();
            let index_vars = terms.iter().all(|(v, _)| self.f.var(*v).dtype == DType::I64);
            if index_vars {
                return self.split_address(base, terms, constant, elem);
            }
        }
        let mut idx = self.index(&lin)?;
        if !proven {
            idx = self.checked_index(idx, len as i64);
        }
        let off = self.b.ins().imul_imm_s(idx, elem);
        Ok(self.b.ins().iadd(base, off))
    }

    /// `base + (sum of c*v + constant) * elem`, as a pointer to the part that does not change
    /// in the innermost enclosing loop plus the rest. Cranelift rematerializes an add or
    /// multiply by a constant in every block that uses it, so an invariant `v*c` feeding an
    /// in-loop sum would be recomputed every iteration; added to the (non-constant) base
    /// pointer first, it is computed once before the loop.
    fn split_address(
        &mut self,
        base: Value,
        mut terms: Vec<(VarId, i64)>,
        constant: i64,
        elem: i64,
    ) -> Result<Value, CodegenError> {
        let deepest = usize::MAX;
        terms.sort_by_key(|(v, _)| (self.depth_of.get(v).copied().unwrap_or(deepest), v.0));
        let inner_from = terms
            .iter()
            .position(|(v, _)| self.depth_of.get(v).is_none_or(|&d| d >= self.depth))
            .unwrap_or(terms.len());
        let (outer, outer_extra) = self.affine_sum(&terms[..inner_from])?;
        let (inner, inner_extra) = self.affine_sum(&terms[inner_from..])?;
        let mut ptr = base;
        if let Some(outer) = outer {
            let off = self.b.ins().imul_imm_s(outer, elem);
            ptr = self.b.ins().iadd(ptr, off);
        }
        if let Some(inner) = inner {
            let off = self.b.ins().imul_imm_s(inner, elem);
            ptr = self.b.ins().iadd(ptr, off);
        }
        let constant = constant + outer_extra + inner_extra;
        if constant != 0 {
            ptr = self.b.ins().iadd_imm_s(ptr, constant * elem);
        }
        Ok(ptr)
    }

    /// An i64 index expression. Affine ones are emitted as a sum ordered from the outermost
    /// loop's variable to the innermost, so the partial sums that do not change in an inner
    /// loop are computed outside it (Cranelift hoists loop-invariant code).
    pub fn index(&mut self, e: &Expr) -> Result<Value, CodegenError> {
        let Some((terms, constant)) = affine_terms(e) else { return self.expr(e) };
        let mut terms: Vec<(VarId, i64)> = terms.into_iter().filter(|&(_, c)| c != 0).collect();
        if terms.iter().any(|(v, _)| self.f.var(*v).dtype != DType::I64) {
            return self.expr(e);
        }
        let deepest = usize::MAX;
        terms.sort_by_key(|(v, _)| (self.depth_of.get(v).copied().unwrap_or(deepest), v.0));
        let (sum, extra) = self.affine_sum(&terms)?;
        Ok(self.plus_constant(sum, constant + extra))
    }

    /// Defines `var` as `base + offset`, remembered so index sums can use `base` and fold the
    /// offset into their constant (see [`FuncTranslator::affine_sum`]).
    pub fn def_offset_var(&mut self, var: VarId, base: Value, offset: i64) -> Result<(), CodegenError> {
        let v = self.var(var)?;
        let val = self.b.ins().iadd_imm_s(base, offset);
        self.b.def_var(v, val);
        self.offset_vars.insert(var, (val, base, offset));
        Ok(())
    }

    /// `sum of c*v` (None when empty) and the constant it leaves over. Cranelift
    /// rematerializes every add of a constant where it is used, which would drag whatever
    /// consumes it into the innermost loop: so constants (including the offsets of jammed
    /// copies) are kept out of the sum, for the caller to add last.
    fn affine_sum(&mut self, terms: &[(VarId, i64)]) -> Result<(Option<Value>, i64), CodegenError> {
        let mut acc: Option<Value> = None;
        let mut extra = 0;
        for &(v, c) in terms {
            let var = self.var(v)?;
            let mut x = self.b.use_var(var);
            if let Some(&(def, base, offset)) = self.offset_vars.get(&v)
                && def == x
            {
                x = base;
                extra += c * offset;
            }
            let term = if c == 1 { x } else { self.b.ins().imul_imm_s(x, c) };
            acc = Some(match acc {
                Some(a) => self.b.ins().iadd(a, term),
                None => term,
            });
        }
        Ok((acc, extra))
    }

    fn plus_constant(&mut self, sum: Option<Value>, constant: i64) -> Value {
        match sum {
            Some(s) if constant == 0 => s,
            Some(s) => self.b.ins().iadd_imm_s(s, constant),
            None => self.b.ins().iconst(I64, constant),
        }
    }

    /// Writes `code` to the status word; atomically, since the threads of a parallel loop
    /// share it.
    fn record_status(&mut self, code: Value) {
        self.b.ins().atomic_store(MemFlagsData::trusted(), code, self.status);
    }

    /// `idx` when in `0..len`; otherwise records this function's code in the status word and
    /// yields 0.
    fn checked_index(&mut self, idx: Value, len: i64) -> Value {
        let ok = self.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, idx, len);
        let (fail, cont) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(ok, cont, &[], fail, &[]);
        self.b.switch_to_block(fail);
        let code = self.b.ins().iconst(I32, self.code);
        self.record_status(code);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().select(ok, idx, zero)
    }

    fn local_slot(&self, id: BufferId, indices: &[Expr]) -> Result<usize, CodegenError> {
        let buf = self.f.buffer(id);
        let mut lin = 0usize;
        for (k, ix) in indices.iter().enumerate() {
            let i = ix.as_int().filter(|&i| i >= 0 && (i as usize) < buf.shape[k]);
            let i = i.ok_or_else(|| self.unsupported(format!("out-of-range or dynamic index into '{}'", buf.name)))?;
            // In range of every axis, so inside the (register-sized) buffer: no overflow.
            lin = lin * buf.shape[k] + i as usize;
        }
        Ok(lin)
    }

    pub fn load(&mut self, id: BufferId, indices: &[Expr]) -> Result<Value, CodegenError> {
        let ty = self.ty(self.f.buffer(id).dtype)?;
        if let Buf::Vars(vars) = &self.bufs[id.0 as usize] {
            let var = vars[self.local_slot(id, indices)?];
            return Ok(self.b.use_var(var));
        }
        let addr = self.address(id, indices)?;
        if self.f.buffer(id).dtype == DType::F16 {
            let bits = self.b.ins().load(I16, MemFlagsData::trusted(), addr, 0);
            return Ok(math::f16_bits_to_f32(&mut self.b, bits));
        }
        Ok(self.b.ins().load(ty, MemFlagsData::trusted(), addr, 0))
    }

    pub fn store(&mut self, id: BufferId, indices: &[Expr], value: Value) -> Result<(), CodegenError> {
        if let Buf::Vars(vars) = &self.bufs[id.0 as usize] {
            let var = vars[self.local_slot(id, indices)?];
            self.b.def_var(var, value);
            return Ok(());
        }
        let addr = self.address(id, indices)?;
        let value =
            if self.f.buffer(id).dtype == DType::F16 { math::f32_to_f16_bits(&mut self.b, value) } else { value };
        self.b.ins().store(MemFlagsData::trusted(), value, addr, 0);
        Ok(())
    }

    /// True when every access to `id` in the function uses constant indices.
    fn constant_indexed(&self, id: BufferId) -> bool {
        fn expr_ok(e: &Expr, id: BufferId) -> bool {
            let mut ok = match e {
                Expr::Load { buffer, indices } if *buffer == id => indices.iter().all(|i| i.as_int().is_some()),
                _ => true,
            };
            e.for_each_child(|c| ok &= expr_ok(c, id));
            ok
        }
        let mut ok = true;
        self.f.body.walk(&mut |s| {
            if let Stmt::Store { buffer, indices, .. } = s
                && *buffer == id
            {
                ok &= indices.iter().all(|i| i.as_int().is_some());
            }
            if let Stmt::Evaluate(call) = s {
                ok &= !call.args.iter().any(|a| matches!(a, Arg::Buffer(b) if *b == id));
            }
            s.for_each_expr(|e| ok &= expr_ok(e, id));
        });
        ok
    }

    fn declare_local(&mut self, id: BufferId) -> Result<(), CodegenError> {
        let buf = self.f.buffer(id);
        let ty = self.ty(buf.dtype)?;
        const MAX_REGISTER_ELEMENTS: usize = 64;
        if buf.num_elements() <= MAX_REGISTER_ELEMENTS && self.constant_indexed(id) {
            let vars: Vec<Variable> = (0..buf.num_elements()).map(|_| self.b.declare_var(ty)).collect();
            for &v in &vars {
                let zero = self.zero(ty);
                self.b.def_var(v, zero);
            }
            self.bufs[id.0 as usize] = Buf::Vars(vars);
        } else {
            // Locals are accumulators; a large one is a malformed module, not a stack frame.
            const MAX_LOCAL_BYTES: usize = 1 << 16;
            let bytes = heron_ir::limits::span_bytes(buf.dtype, &buf.shape)
                .filter(|&b| b <= MAX_LOCAL_BYTES as u64)
                .ok_or_else(|| self.unsupported(format!("a local buffer '{}' of shape {:?}", buf.name, buf.shape)))?
                as u32;
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 4));
            let p = self.b.ins().stack_addr(self.ptr, slot, 0);
            self.bufs[id.0 as usize] = Buf::Ptr(p);
        }
        Ok(())
    }

    pub fn zero(&mut self, ty: Type) -> Value {
        match ty {
            F32 => self.b.ins().f32const(0.0),
            F64 => self.b.ins().f64const(0.0),
            _ => self.b.ins().iconst(ty, 0),
        }
    }

    pub fn stmt(&mut self, s: &Stmt) -> Result<(), CodegenError> {
        match s {
            Stmt::Seq(v) => {
                for s in v {
                    self.stmt(s)?;
                }
            }
            Stmt::For { var, extent, kind: ForKind::Parallel, body } if self.slice.is_some() => {
                let r = crate::vector::loop_range(&self.ranges, extent);
                self.ranges.set(*var, r);
                // This call's slice, clamped to the loop so the range proofs hold whatever
                // the caller passed.
                let (lo, hi) = self.slice.expect("checked");
                let ext = self.expr(extent)?;
                let zero = self.b.ins().iconst(I64, 0);
                let start = self.b.ins().smax(lo, zero);
                let end = self.b.ins().smin(hi, ext);
                self.counted_loop(*var, start, end, 1, |t| t.stmt(body))?;
            }
            Stmt::For { var, extent, kind, body } => {
                let r = crate::vector::loop_range(&self.ranges, extent);
                self.ranges.set(*var, r);
                if self.options.vectorize {
                    let done = match (kind, &**body) {
                        (ForKind::Vectorized(shape), _) => {
                            crate::vector::try_emit(self, *var, extent, *shape, body, None)?
                        }
                        // Unroll-and-jam over a vectorized loop.
                        (
                            ForKind::Unrolled(factor),
                            Stmt::For { var: v, extent: e, kind: ForKind::Vectorized(shape), body: b },
                        ) => crate::vector::try_emit(self, *v, e, *shape, b, Some((*var, extent, *factor)))?,
                        _ => false,
                    };
                    if done {
                        return Ok(());
                    }
                    if matches!(kind, ForKind::Vectorized(_))
                        || matches!(**body, Stmt::For { kind: ForKind::Vectorized(_), .. })
                            && matches!(kind, ForKind::Unrolled(_))
                    {
                        let name = &self.f.var(*var).name;
                        self.scalar_vector_loops.push(format!("{}: loop %{name}", self.f.name));
                    }
                }
                match (kind, extent.as_int()) {
                    (ForKind::Unrolled(factor), Some(n)) => {
                        self.unrolled_loop(*var, n, i64::from(*factor), |t| t.stmt(body))?
                    }
                    _ => self.serial_loop(*var, extent, |t| t.stmt(body))?,
                }
            }
            Stmt::Store { buffer, indices, value } => {
                let v = self.expr(value)?;
                self.store(*buffer, indices, v)?;
            }
            Stmt::Allocate { buffer, .. } => {
                if self.f.buffer(*buffer).scope != Scope::Local {
                    return Err(self.unsupported(format!("unplanned allocation of '{}'", self.f.buffer(*buffer).name)));
                }
                self.declare_local(*buffer)?;
            }
            Stmt::AllocateConst { buffer, .. } => {
                return Err(self.unsupported(format!("unplanned constant '{}'", self.f.buffer(*buffer).name)));
            }
            Stmt::DeclPoolBuffer { buffer, pool, byte_offset } => {
                let offset =
                    i64::try_from(*byte_offset).map_err(|_| self.unsupported(format!("byte offset {byte_offset}")))?;
                self.bufs[buffer.0 as usize] = match self.bufs[pool.0 as usize] {
                    Buf::Arg(k) => Buf::View { pool: k, offset },
                    _ => {
                        let base = self.buffer_ptr(*pool)?;
                        Buf::Ptr(self.b.ins().iadd_imm_s(base, offset))
                    }
                };
            }
            Stmt::Evaluate(call) => match &call.callee {
                Callee::Func(name) => {
                    let fref = *self.callees.funcs.get(name).ok_or_else(|| CodegenError::NoFunction(name.clone()))?;
                    let mut args = Vec::with_capacity(call.args.len() + 2);
                    for a in &call.args {
                        match a {
                            Arg::Buffer(b) => args.push(self.buffer_ptr(*b)?),
                            Arg::Expr(_) => return Err(self.unsupported("scalar arguments to a module function")),
                        }
                    }
                    // Module functions report out-of-range indices through the status word.
                    args.extend([self.status, self.context]);
                    match self.callees.tasks.get(name).copied() {
                        Some((task, extent)) => self.parallel_call(fref, task, extent, args),
                        None => {
                            self.b.ins().call(fref, &args);
                        }
                    }
                }
                Callee::Extern(name) => self.routine_call(name, &call.args)?,
            },
            Stmt::If { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let (tb, eb, merge) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.stmt(then)?;
                self.b.ins().jump(merge, &[]);
                self.b.switch_to_block(eb);
                if let Some(o) = otherwise {
                    self.stmt(o)?;
                }
                self.b.ins().jump(merge, &[]);
                self.b.switch_to_block(merge);
            }
            Stmt::Let { var, value } => {
                self.depth_of.insert(*var, self.depth);
                let v = self.expr(value)?;
                let var_ = self.var(*var)?;
                self.b.def_var(var_, v);
                let r = if self.f.var(*var).dtype.is_int() { self.ranges.range(value) } else { None };
                self.ranges.set(*var, r);
            }
        }
        Ok(())
    }

    /// Calls precompiled routine `name` through the run context's routine table. Its
    /// registered signature decides the call: the arguments must match it. Routines are trusted
    /// to stay inside the buffers they are given. Without a context, or with one whose tables
    /// lack the routine (too short, or another routine's id at its index) or a device slot it
    /// takes, the call is skipped and the status word gets [`MISSING_ROUTINE`].
    fn routine_call(&mut self, name: &str, call_args: &[Arg]) -> Result<(), CodegenError> {
        let routines = self.callees.routines;
        let Some(k) = routines.iter().position(|r| r.name == name) else {
            return Err(self.unsupported(format!("a call to routine '{name}', which was not provided")));
        };
        let params = &routines[k].params;
        let mut sig = Signature::new(self.b.func.signature.call_conv);
        let mut args = Vec::with_capacity(params.len());
        let mismatch = || format!("a call of routine '{name}' that does not match its registered signature {params:?}");
        let supplied = params.iter().filter(|p| !matches!(p, RoutineParam::Device(_))).count();
        if call_args.len() != supplied {
            return Err(self.unsupported(mismatch()));
        }
        let slots = params.iter().filter_map(|p| if let RoutineParam::Device(s) = p { Some(*s) } else { None });
        let needed_devices = slots.map(|s| i64::from(s) + 1).max().unwrap_or(0);
        let (call, fail, done) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let checks = self.b.create_block();
        self.b.ins().brif(self.context, checks, &[], fail, &[]);
        self.b.switch_to_block(checks);
        let flags = MemFlagsData::trusted();
        let routine_count =
            self.b.ins().load(self.ptr, flags, self.context, crate::threads::RunContext::ROUTINE_COUNT_OFFSET);
        let device_count =
            self.b.ins().load(self.ptr, flags, self.context, crate::threads::RunContext::DEVICE_COUNT_OFFSET);
        let has_routine = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, routine_count, k as i64);
        let has_devices = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, device_count, needed_devices);
        let counts_ok = self.b.ins().band(has_routine, has_devices);
        // The entry is read only once the count says it exists.
        let check_id = self.b.create_block();
        self.b.ins().brif(counts_ok, check_id, &[], fail, &[]);
        self.b.switch_to_block(check_id);
        let entry_offset = k
            .checked_mul(RoutineEntry::SIZE)
            .and_then(|o| i32::try_from(o).ok())
            .ok_or_else(|| self.unsupported("routine table size"))?;
        let table = self.b.ins().load(self.ptr, flags, self.context, crate::threads::RunContext::ROUTINES_OFFSET);
        let id = self.b.ins().load(I64, flags, table, entry_offset + RoutineEntry::ID_OFFSET);
        let expected = self.b.ins().iconst(I64, routine_id(name) as i64);
        let same = self.b.ins().icmp(IntCC::Equal, id, expected);
        self.b.ins().brif(same, call, &[], fail, &[]);
        self.b.switch_to_block(fail);
        let code = self.b.ins().iconst(I32, i64::from(MISSING_ROUTINE));
        self.record_status(code);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(call);
        let mut call_args = call_args.iter();
        for &p in params {
            if let RoutineParam::Device(slot) = p {
                let table =
                    self.b.ins().load(self.ptr, flags, self.context, crate::threads::RunContext::DEVICES_OFFSET);
                let offset = i32::try_from(u64::from(slot) * u64::from(self.ptr.bytes()))
                    .map_err(|_| self.unsupported(format!("device slot {slot}")))?;
                let handle = self.b.ins().load(self.ptr, flags, table, offset);
                sig.params.push(AbiParam::new(self.ptr));
                args.push(handle);
                continue;
            }
            let a = call_args.next().expect("counted above");
            let (value, ty) = match (a, p) {
                (Arg::Buffer(b), RoutineParam::Buffer) => (self.buffer_ptr(*b)?, self.ptr),
                (Arg::Expr(e), RoutineParam::I64 | RoutineParam::F32 | RoutineParam::F64) => {
                    let dtype = e.dtype(self.f);
                    let wanted = match p {
                        RoutineParam::F32 => dtype == DType::F32,
                        RoutineParam::F64 => dtype == DType::F64,
                        _ => dtype.is_int(),
                    };
                    if !wanted {
                        return Err(self.unsupported(mismatch()));
                    }
                    let v = self.expr(e)?;
                    let v = self.extern_scalar(v, dtype)?;
                    (v, self.b.func.dfg.value_type(v))
                }
                _ => return Err(self.unsupported(mismatch())),
            };
            sig.params.push(AbiParam::new(ty));
            args.push(value);
        }
        let address = self.b.ins().load(self.ptr, flags, table, entry_offset + RoutineEntry::ADDRESS_OFFSET);
        let sig = self.b.import_signature(sig);
        self.b.ins().call_indirect(sig, address, &args);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }

    /// Calls a function with a parallel loop (`args`: its buffers, the status word and the
    /// context): with a run context, through `parallel_for` and the task trampoline; without
    /// one, directly with the whole range.
    fn parallel_call(&mut self, func: FuncRef, task: FuncRef, extent: i64, args: Vec<Value>) {
        let extent = self.b.ins().iconst(I64, extent);
        let zero = self.b.ins().iconst(I64, 0);
        let direct_call = |t: &mut Self| {
            let mut direct = args.clone();
            direct.extend([zero, extent]);
            t.b.ins().call(func, &direct);
        };
        let context = self.context;
        let (pooled, direct, merge) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        self.b.ins().brif(context, pooled, &[], direct, &[]);
        self.b.switch_to_block(direct);
        direct_call(self);
        self.b.ins().jump(merge, &[]);
        self.b.switch_to_block(pooled);
        let buffers = &args[..args.len() - 2];
        let word = self.ptr.bytes();
        let size = u32::try_from(buffers.len()).unwrap_or(u32::MAX).saturating_mul(word).max(word);
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 3));
        for (k, &p) in buffers.iter().enumerate() {
            self.b.ins().stack_store(self.ptr, p, slot, (k as u32 * word) as i32);
        }
        let argv = self.b.ins().stack_addr(self.ptr, slot, 0);
        let task_addr = self.b.ins().func_addr(self.ptr, task);
        let parallel_for = self.b.ins().load(self.ptr, MemFlagsData::trusted(), context, 0);
        let sig = parallel_for_signature(&self.b, self.ptr);
        let sig = self.b.import_signature(sig);
        let status = args[args.len() - 2];
        self.b.ins().call_indirect(sig, parallel_for, &[context, task_addr, argv, status, extent]);
        self.b.ins().jump(merge, &[]);
        self.b.switch_to_block(merge);
    }

    /// `for var in 0..extent { body }` with the induction variable in a block parameter.
    pub fn serial_loop(
        &mut self,
        var: VarId,
        extent: &Expr,
        body: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        // A single iteration needs no loop (1x1 kernels have several of these).
        if extent.as_int() == Some(1) {
            let zero = self.b.ins().iconst(I64, 0);
            let v = self.var(var)?;
            self.b.def_var(v, zero);
            self.depth_of.insert(var, 0);
            return body(self);
        }
        let ext = self.expr(extent)?;
        let start = self.b.ins().iconst(I64, 0);
        self.counted_loop(var, start, ext, 1, body)
    }

    /// `for var in (start..end).step_by(step)` (the body sees `var`).
    /// `for var in 0..n` with `factor` copies of the body per step and the leftover iterations
    /// one at a time; with `factor >= n`, no loop at all (short kernel windows: their index
    /// terms fold to constants).
    pub fn unrolled_loop(
        &mut self,
        var: VarId,
        n: i64,
        factor: i64,
        mut body: impl FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let at = |t: &mut Self, i: i64| -> Result<(), CodegenError> {
            let v = t.var(var)?;
            let c = t.b.ins().iconst(I64, i);
            t.b.def_var(v, c);
            Ok(())
        };
        let main_end = if factor >= n { 0 } else { n - n % factor };
        if main_end > 0 {
            let start = self.b.ins().iconst(I64, 0);
            let end = self.b.ins().iconst(I64, main_end);
            self.counted_loop(var, start, end, factor, |t| {
                for k in 0..factor {
                    if k > 0 {
                        let v = t.var(var)?;
                        let i = t.b.use_var(v);
                        let next = t.b.ins().iadd_imm_s(i, 1);
                        t.b.def_var(v, next);
                    }
                    body(t)?;
                }
                Ok(())
            })?;
        }
        for i in main_end..n {
            at(self, i)?;
            body(self)?;
        }
        Ok(())
    }

    pub fn counted_loop(
        &mut self,
        var: VarId,
        start: Value,
        end: Value,
        step: i64,
        body: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let (header, body_block, exit): (Block, Block, Block) =
            (self.b.create_block(), self.b.create_block(), self.b.create_block());
        self.b.append_block_param(header, I64);
        self.b.ins().jump(header, &[start.into()]);
        self.b.switch_to_block(header);
        let i = self.b.block_params(header)[0];
        let go = self.b.ins().icmp(IntCC::SignedLessThan, i, end);
        self.b.ins().brif(go, body_block, &[], exit, &[]);
        // Sealing each block as soon as its predecessors are known lets the SSA builder drop
        // the header parameters of variables the loop never changes; left in place they make
        // everything computed from them look loop-variant, so nothing is hoisted.
        self.b.seal_block(body_block);
        self.b.seal_block(exit);
        self.b.switch_to_block(body_block);
        let v = self.var(var)?;
        self.b.def_var(v, i);
        self.depth += 1;
        self.depth_of.insert(var, self.depth);
        let r = body(self);
        self.depth -= 1;
        r?;
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.ins().jump(header, &[next.into()]);
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        Ok(())
    }

    pub fn expr(&mut self, e: &Expr) -> Result<Value, CodegenError> {
        Ok(match e {
            Expr::Int { value, dtype } => {
                let ty = self.ty(*dtype)?;
                self.b.ins().iconst(ty, *value)
            }
            Expr::Float { value, dtype } => match dtype {
                DType::F32 => self.b.ins().f32const(*value as f32),
                DType::F16 => self.b.ins().f32const(heron_ir::f16::from_f64(*value).to_f32()),
                DType::F64 => self.b.ins().f64const(*value),
                other => return Err(self.unsupported(format!("float literal of dtype {other}"))),
            },
            Expr::Var(v) => {
                let var = self.var(*v)?;
                self.b.use_var(var)
            }
            Expr::Binary { op, lhs, rhs } => {
                let dtype = lhs.dtype(self.f);
                let (a, c) = (self.expr(lhs)?, self.expr(rhs)?);
                self.binary(*op, a, c, dtype)?
            }
            Expr::Cmp { op, lhs, rhs } => {
                let dtype = lhs.dtype(self.f);
                let (a, c) = (self.expr(lhs)?, self.expr(rhs)?);
                self.compare(*op, a, c, dtype)
            }
            Expr::Not(x) => {
                let v = self.expr(x)?;
                self.b.ins().icmp_imm_s(IntCC::Equal, v, 0)
            }
            Expr::Select { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let (t, o) = (self.expr(then)?, self.expr(otherwise)?);
                self.b.ins().select(c, t, o)
            }
            Expr::Cast { dtype, value } => {
                let from = value.dtype(self.f);
                let v = self.expr(value)?;
                self.cast(v, from, *dtype)?
            }
            Expr::Math { op, arg } => {
                let dtype = arg.dtype(self.f);
                let v = self.expr(arg)?;
                self.math(*op, v, dtype)?
            }
            Expr::Load { buffer, indices } => self.load(*buffer, indices)?,
        })
    }

    pub fn binary(&mut self, op: BinOp, a: Value, c: Value, dtype: DType) -> Result<Value, CodegenError> {
        if dtype == DType::F16 {
            let r = self.binary(op, a, c, DType::F32)?;
            return Ok(math::round_to_f16(&mut self.b, r));
        }
        if dtype.is_float() {
            return Ok(match op {
                BinOp::Add => self.b.ins().fadd(a, c),
                BinOp::Sub => self.b.ins().fsub(a, c),
                BinOp::Mul => self.b.ins().fmul(a, c),
                BinOp::Div => self.b.ins().fdiv(a, c),
                BinOp::Min => self.b.ins().fmin(a, c),
                BinOp::Max => self.b.ins().fmax(a, c),
                BinOp::Pow | BinOp::Fmod => {
                    // In f64 and rounded once, as the interpreters compute it.
                    let f32 = self.b.func.dfg.value_type(a) == F32;
                    let (x, y) =
                        if f32 { (self.b.ins().fpromote(F64, a), self.b.ins().fpromote(F64, c)) } else { (a, c) };
                    let name = if op == BinOp::Pow { "pow" } else { "fmod" };
                    let call = self.b.ins().call(self.callees.libm2[name], &[x, y]);
                    let r = self.b.inst_results(call)[0];
                    if f32 { self.b.ins().fdemote(F32, r) } else { r }
                }
                other => return Err(self.unsupported(format!("{other:?} on {dtype}"))),
            });
        }
        let signed = dtype.is_signed_int();
        Ok(match op {
            BinOp::Add => self.b.ins().iadd(a, c),
            BinOp::Sub => self.b.ins().isub(a, c),
            BinOp::Mul => self.b.ins().imul(a, c),
            BinOp::Min if signed => self.b.ins().smin(a, c),
            BinOp::Max if signed => self.b.ins().smax(a, c),
            BinOp::Min => self.b.ins().umin(a, c),
            BinOp::Max => self.b.ins().umax(a, c),
            BinOp::Shl => self.b.ins().ishl(a, c),
            BinOp::Shr if signed => self.b.ins().sshr(a, c),
            BinOp::Shr => self.b.ins().ushr(a, c),
            BinOp::And | BinOp::BitAnd => self.b.ins().band(a, c),
            BinOp::Or | BinOp::BitOr => self.b.ins().bor(a, c),
            BinOp::BitXor => self.b.ins().bxor(a, c),
            BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod => self.division(op, a, c, signed),
            BinOp::Pow | BinOp::Fmod => return Err(self.unsupported(format!("{op:?} on {dtype}"))),
        })
    }

    /// Integer division that never traps: x / 0 is 0, MIN / -1 wraps.
    fn division(&mut self, op: BinOp, a: Value, c: Value, signed: bool) -> Value {
        let ty = self.b.func.dfg.value_type(a);
        let zero = self.b.ins().iconst(ty, 0);
        let one = self.b.ins().iconst(ty, 1);
        let is_zero = self.b.ins().icmp_imm_s(IntCC::Equal, c, 0);
        if !signed {
            let d = self.b.ins().select(is_zero, one, c);
            let r = match op {
                BinOp::FloorMod => self.b.ins().urem(a, d),
                _ => self.b.ins().udiv(a, d),
            };
            return self.b.ins().select(is_zero, zero, r);
        }
        let is_neg_one = self.b.ins().icmp_imm_s(IntCC::Equal, c, -1);
        let special = self.b.ins().bor(is_zero, is_neg_one);
        let d = self.b.ins().select(special, one, c);
        let q = self.b.ins().sdiv(a, d);
        let r = self.b.ins().srem(a, d);
        let result = match op {
            BinOp::Div => q,
            _ => {
                // Round toward negative infinity: adjust when the remainder's sign differs from
                // the divisor's.
                let r_nonzero = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let x = self.b.ins().bxor(r, d);
                let signs_differ = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
                let adjust = self.b.ins().band(r_nonzero, signs_differ);
                if op == BinOp::FloorDiv {
                    let q1 = self.b.ins().iadd_imm_s(q, -1);
                    self.b.ins().select(adjust, q1, q)
                } else {
                    let r1 = self.b.ins().iadd(r, d);
                    self.b.ins().select(adjust, r1, r)
                }
            }
        };
        // x / -1 = -x (wrapping); x mod -1 = 0.
        let neg = self.b.ins().ineg(a);
        let by_neg_one = if op == BinOp::FloorMod { zero } else { neg };
        let result = self.b.ins().select(is_neg_one, by_neg_one, result);
        self.b.ins().select(is_zero, zero, result)
    }

    pub fn compare(&mut self, op: CmpOp, a: Value, c: Value, dtype: DType) -> Value {
        if dtype.is_float() {
            let cc = match op {
                CmpOp::Eq => FloatCC::Equal,
                CmpOp::Ne => FloatCC::NotEqual,
                CmpOp::Lt => FloatCC::LessThan,
                CmpOp::Le => FloatCC::LessThanOrEqual,
                CmpOp::Gt => FloatCC::GreaterThan,
                CmpOp::Ge => FloatCC::GreaterThanOrEqual,
            };
            return self.b.ins().fcmp(cc, a, c);
        }
        let s = dtype.is_signed_int();
        let cc = match op {
            CmpOp::Eq => IntCC::Equal,
            CmpOp::Ne => IntCC::NotEqual,
            CmpOp::Lt if s => IntCC::SignedLessThan,
            CmpOp::Le if s => IntCC::SignedLessThanOrEqual,
            CmpOp::Gt if s => IntCC::SignedGreaterThan,
            CmpOp::Ge if s => IntCC::SignedGreaterThanOrEqual,
            CmpOp::Lt => IntCC::UnsignedLessThan,
            CmpOp::Le => IntCC::UnsignedLessThanOrEqual,
            CmpOp::Gt => IntCC::UnsignedGreaterThan,
            CmpOp::Ge => IntCC::UnsignedGreaterThanOrEqual,
        };
        self.b.ins().icmp(cc, a, c)
    }

    /// Conversion with Rust `as` semantics (float to int saturates, NaN to 0; to bool is != 0).
    pub fn cast(&mut self, v: Value, from: DType, to: DType) -> Result<Value, CodegenError> {
        if from == to {
            return Ok(v);
        }
        // f16 values are f32 in registers: convert as f32, then round to f16.
        if from == DType::F16 {
            return self.cast(v, DType::F32, to);
        }
        if to == DType::F16 {
            let f = self.cast(v, from, DType::F32)?;
            return Ok(math::round_to_f16(&mut self.b, f));
        }
        let (fty, tty) = (self.ty(from)?, self.ty(to)?);
        if to == DType::Bool {
            return Ok(if from.is_float() {
                let z = self.zero(fty);
                self.b.ins().fcmp(FloatCC::NotEqual, v, z)
            } else {
                self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
            });
        }
        let from_signed = from.is_signed_int();
        if from.is_float() && to.is_float() {
            return Ok(if tty == F64 { self.b.ins().fpromote(F64, v) } else { self.b.ins().fdemote(F32, v) });
        }
        if to.is_float() {
            let wide = if fty.bits() < 32 { self.extend(v, I32, from_signed) } else { v };
            return Ok(if from_signed {
                self.b.ins().fcvt_from_sint(tty, wide)
            } else {
                self.b.ins().fcvt_from_uint(tty, wide)
            });
        }
        if from.is_float() {
            return Ok(match to {
                DType::I64 => self.b.ins().fcvt_to_sint_sat(I64, v),
                DType::U64 => self.b.ins().fcvt_to_uint_sat(I64, v),
                DType::I32 => self.b.ins().fcvt_to_sint_sat(I32, v),
                DType::U32 => self.b.ins().fcvt_to_uint_sat(I32, v),
                _ => {
                    // Narrow types: saturate through i32, then clamp to the type's range.
                    let wide = self.b.ins().fcvt_to_sint_sat(I32, v);
                    let (lo, hi) = match to {
                        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
                        DType::U8 => (0, u8::MAX as i64),
                        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
                        _ => (0, u16::MAX as i64),
                    };
                    let (lo, hi) = (self.b.ins().iconst(I32, lo), self.b.ins().iconst(I32, hi));
                    let c = self.b.ins().smax(wide, lo);
                    let c = self.b.ins().smin(c, hi);
                    self.b.ins().ireduce(tty, c)
                }
            });
        }
        // Integer to integer: wrap.
        Ok(match tty.bits().cmp(&fty.bits()) {
            std::cmp::Ordering::Equal => v,
            std::cmp::Ordering::Less => self.b.ins().ireduce(tty, v),
            std::cmp::Ordering::Greater => self.extend(v, tty, from_signed),
        })
    }

    /// A scalar argument for a precompiled routine: integers widened to i64, floats as they are.
    fn extern_scalar(&mut self, v: Value, dtype: DType) -> Result<Value, CodegenError> {
        Ok(match dtype {
            DType::F32 | DType::F64 => v,
            DType::I64 | DType::U64 => v,
            d if d.is_int() || d == DType::Bool => self.extend(v, I64, d.is_signed_int()),
            other => return Err(self.unsupported(format!("a {other} argument to a precompiled routine"))),
        })
    }

    fn extend(&mut self, v: Value, to: Type, signed: bool) -> Value {
        if signed { self.b.ins().sextend(to, v) } else { self.b.ins().uextend(to, v) }
    }

    fn math(&mut self, op: MathOp, v: Value, dtype: DType) -> Result<Value, CodegenError> {
        if dtype == DType::F16 {
            let r = self.math(op, v, DType::F32)?;
            return Ok(math::round_to_f16(&mut self.b, r));
        }
        let ty = self.ty(dtype)?;
        if !dtype.is_float() {
            return match op {
                MathOp::Abs if dtype.is_signed_int() => {
                    // Like the interpreter (through f64, then `as`): |MIN| saturates to MAX.
                    let a = self.b.ins().iabs(v);
                    let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, a, 0);
                    let max = self.b.ins().iconst(ty, (1i64 << (ty.bits() - 1)) - 1);
                    Ok(self.b.ins().select(neg, max, a))
                }
                MathOp::Abs | MathOp::Round => Ok(v),
                other => Err(self.unsupported(format!("{other:?} on {dtype}"))),
            };
        }
        if let Some(name) = op.libm_name() {
            // In f64 and rounded once, as the interpreters compute it.
            let wide = if ty == F32 { self.b.ins().fpromote(F64, v) } else { v };
            let r = self.libm(name, wide);
            return Ok(if ty == F32 { self.b.ins().fdemote(F32, r) } else { r });
        }
        Ok(match op {
            MathOp::Sqrt => self.b.ins().sqrt(v),
            MathOp::Abs => self.b.ins().fabs(v),
            MathOp::Round => self.b.ins().nearest(v),
            MathOp::Floor => self.b.ins().floor(v),
            MathOp::Ceil => self.b.ins().ceil(v),
            MathOp::Exp | MathOp::Tanh | MathOp::Sigmoid | MathOp::Erf if ty == F32 => match op {
                MathOp::Exp => math::exp(&mut self.b, F32, v),
                MathOp::Tanh => math::tanh(&mut self.b, F32, v),
                MathOp::Erf => math::erf(&mut self.b, F32, v),
                _ => math::sigmoid(&mut self.b, F32, v),
            },
            MathOp::Exp => self.libm("exp", v),
            MathOp::Tanh => self.libm("tanh", v),
            MathOp::Erf => self.libm("erf", v),
            MathOp::Sigmoid => {
                let n = self.b.ins().fneg(v);
                let e = self.libm("exp", n);
                let one = self.b.ins().f64const(1.0);
                let d = self.b.ins().fadd(e, one);
                self.b.ins().fdiv(one, d)
            }
            other => return Err(self.unsupported(format!("{other:?}"))),
        })
    }

    pub(crate) fn libm(&mut self, name: &str, v: Value) -> Value {
        let call = self.b.ins().call(self.callees.libm[name], &[v]);
        self.b.inst_results(call)[0]
    }
}
