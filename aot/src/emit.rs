//! The object file: the shared code generator (`heron_jit::emit_module`) through
//! cranelift-object, embedded pools as data symbols, and the exported C entries:
//! `heron_<name>_run`, which checks the caller's pointers and calls the generated `main`,
//! `heron_<name>_run_checked`, which also checks the byte size the caller gives for each buffer,
//! and `_run_ctx` / `_run_checked_ctx`, the same with a run context (threads, routines).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I32;
use cranelift_codegen::ir::{AbiParam, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, UserFuncName, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{DataDescription, DataId, Linkage, Module, default_libcall_names};
use cranelift_object::{ObjectBuilder, ObjectModule};
use heron_jit::{CodegenOptions, emit_module};
use heron_planner::PoolKind;
use heron_planner::rewrite::Rewritten;

use crate::AotError;
use crate::metadata::{Metadata, PoolSource};

/// Where the entry finds one of `main`'s parameters.
enum ParamSource {
    /// Field `index` of the inputs or outputs struct; the pointer must be aligned to `align`
    /// and the buffer hold `size` bytes.
    Tensor {
        outputs: bool,
        index: usize,
        align: u64,
        size: u64,
    },
    /// Field `index` of the workspaces or parameters struct.
    UserPool {
        parameters: bool,
        index: usize,
        align: u64,
        size: u64,
    },
    Embedded(DataId),
}

/// Compiles `rewritten` into an ELF object whose only exported symbol is `meta.entry`.
pub fn emit_object(rewritten: &Rewritten, meta: &Metadata, options: &crate::AotOptions) -> Result<Vec<u8>, AotError> {
    let isa = heron_jit::isa::build_isa(options.target_cpu, options.opt_level, true)?;
    let fma = heron_jit::isa::has_fma(&*isa);
    let builder = ObjectBuilder::new(isa, meta.c_name.as_bytes(), default_libcall_names())
        .map_err(|e| AotError::Object(e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    let inner = format!("heron_{}_main", meta.c_name);
    // Routines are reached through the run context's table, never linked: the object needs
    // libc and libm only.
    let codegen = CodegenOptions { vectorize: true, fma };
    let emitted = emit_module(&mut module, &rewritten.module, &inner, Linkage::Local, codegen, &options.routines)?;
    let mut sources = Vec::new();
    for (k, t) in meta.inputs.iter().enumerate() {
        sources.push(ParamSource::Tensor {
            outputs: false,
            index: k,
            align: element_align(t),
            size: t.size_bytes as u64,
        });
    }
    for (k, t) in meta.outputs.iter().enumerate() {
        sources.push(ParamSource::Tensor {
            outputs: true,
            index: k,
            align: element_align(t),
            size: t.size_bytes as u64,
        });
    }
    let (mut workspace_fields, mut parameter_fields) = (0, 0);
    for (k, (pool, pm)) in rewritten.pools.iter().zip(&meta.pools).enumerate() {
        let parameters = pool.kind == PoolKind::Constant;
        let size = rewritten.pool_sizes[k];
        sources.push(match pm.source {
            PoolSource::User => {
                let counter = if parameters { &mut parameter_fields } else { &mut workspace_fields };
                *counter += 1;
                ParamSource::UserPool { parameters, index: *counter - 1, align: pool.alignment, size }
            }
            PoolSource::Embedded => {
                let symbol = format!("heron_{}_pool_{}", meta.c_name, pm.c_name);
                let id = module.declare_data(&symbol, Linkage::Local, !parameters, false)?;
                let mut data = DataDescription::new();
                // A zero-sized pool still gets a distinct, valid address.
                let bytes = size.max(1) as usize;
                match &rewritten.images[k] {
                    Some(image) if parameters => {
                        let mut contents = image.to_bytes().map_err(|e| AotError::Internal(e.to_string()))?;
                        contents.resize(bytes, 0);
                        data.define(contents.into_boxed_slice());
                    }
                    _ => data.define_zeroinit(bytes),
                }
                data.set_align(pool.alignment);
                module.define_data(id, &data)?;
                ParamSource::Embedded(id)
            }
        });
    }
    if sources.len() != emitted.num_args {
        return Err(AotError::Internal(format!(
            "main takes {} buffers, the entry provides {}",
            emitted.num_args,
            sources.len()
        )));
    }
    define_entry(&mut module, &meta.entry, emitted.entry, &sources, Entry::Plain)?;
    define_entry(&mut module, &meta.entry_checked, emitted.entry, &sources, Entry::Checked)?;
    define_entry(&mut module, &meta.entry_ctx, emitted.entry, &sources, Entry::Context)?;
    define_entry(&mut module, &meta.entry_checked_ctx, emitted.entry, &sources, Entry::CheckedContext)?;
    let product = module.finish();
    product.emit().map_err(|e| AotError::Object(e.to_string()))
}

fn element_align(t: &crate::metadata::TensorMeta) -> u64 {
    t.dtype().map_or(1, |d| d.size_bytes() as u64).max(1)
}

/// The exported C entries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// `heron_<name>_run`.
    Plain,
    /// `heron_<name>_run_checked`: sizes structs too.
    Checked,
    /// `heron_<name>_run_ctx`: a run context last (parallel loops on its threads; NULL: none).
    Context,
    /// `heron_<name>_run_checked_ctx`: both.
    CheckedContext,
}

/// `int32_t name(const Inputs*, Outputs*, const Workspaces*, const Parameters*)`: loads every
/// pointer, rejects NULL or misaligned ones with `HERON_ERROR_ARGUMENT` before anything is
/// written, then calls the generated entry with the argument array and a status word.
///
/// With `checked`, each struct is followed by its sizes struct (one `size_t` per field, the
/// byte size of the buffer given there) and a buffer smaller than the model needs is refused
/// with `HERON_ERROR_SIZE`, also before anything is written:
/// `int32_t name(const Inputs*, const InputSizes*, Outputs*, const OutputSizes*, ...)`.
fn define_entry(
    module: &mut ObjectModule,
    name: &str,
    inner: cranelift_module::FuncId,
    sources: &[ParamSource],
    kind: Entry,
) -> Result<(), AotError> {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    let checked = matches!(kind, Entry::Checked | Entry::CheckedContext);
    let structs_per_kind = if checked { 2 } else { 1 };
    sig.params.extend((0..4 * structs_per_kind).map(|_| AbiParam::new(ptr)));
    let with_context = matches!(kind, Entry::Context | Entry::CheckedContext);
    if with_context {
        sig.params.push(AbiParam::new(ptr));
    }
    sig.returns.push(AbiParam::new(I32));
    let id = module.declare_function(name, Linkage::Export, &sig)?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let inner_ref = module.declare_func_in_func(inner, b.func);
        let entry = b.create_block();
        let fail = b.create_block();
        let too_small = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let params = b.block_params(entry).to_vec();
        // The pointer structs, and (checked) the sizes struct after each.
        let structs: Vec<Value> = params[..4 * structs_per_kind].iter().step_by(structs_per_kind).copied().collect();
        let sizes: Vec<Value> = if checked { params.iter().skip(1).step_by(2).copied().collect() } else { Vec::new() };
        let word = ptr.bytes();
        let args_slot =
            b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, word * sources.len() as u32, 3));
        let status_slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 4, 2));
        // Caller memory: no alignment or no-trap promises.
        let user = MemFlagsData::new();
        let mut checked_structs = [false; 4];
        for (k, source) in sources.iter().enumerate() {
            let (s, index, align, need) = match *source {
                ParamSource::Tensor { outputs, index, align, size } => (usize::from(outputs), index, align, size),
                ParamSource::UserPool { parameters, index, align, size } if size > 0 => {
                    (2 + usize::from(parameters), index, align, size)
                }
                // An empty pool is never touched: whatever the caller passes is fine.
                ParamSource::UserPool { .. } => {
                    let null = b.ins().iconst(ptr, 0);
                    b.ins().stack_store(ptr, null, args_slot, (k as u32 * word) as i32);
                    continue;
                }
                ParamSource::Embedded(data) => {
                    let gv = module.declare_data_in_func(data, b.func);
                    let p = b.ins().symbol_value(ptr, gv);
                    b.ins().stack_store(ptr, p, args_slot, (k as u32 * word) as i32);
                    continue;
                }
            };
            if !checked_structs[s] {
                checked_structs[s] = true;
                branch_if_bad(&mut b, structs[s], word as u64, fail);
                if checked {
                    branch_if_bad(&mut b, sizes[s], word as u64, fail);
                }
            }
            let p = b.ins().load(ptr, user, structs[s], (index as u32 * word) as i32);
            branch_if_bad(&mut b, p, align, fail);
            if checked {
                // size_t is pointer-sized on every target Heron emits for.
                let given = b.ins().load(ptr, user, sizes[s], (index as u32 * word) as i32);
                let short = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, given, need as i64);
                let ok = b.create_block();
                b.ins().brif(short, too_small, &[], ok, &[]);
                b.switch_to_block(ok);
            }
            b.ins().stack_store(ptr, p, args_slot, (k as u32 * word) as i32);
        }
        let zero = b.ins().iconst(I32, 0);
        b.ins().stack_store(ptr, zero, status_slot, 0);
        let args = b.ins().stack_addr(ptr, args_slot, 0);
        let status = b.ins().stack_addr(ptr, status_slot, 0);
        // Without a context (or with a NULL one) everything runs on the calling thread.
        let context = if with_context { params[4 * structs_per_kind] } else { b.ins().iconst(ptr, 0) };
        b.ins().call(inner_ref, &[args, status, context]);
        let code = b.ins().stack_load(ptr, I32, status_slot, 0);
        let failed = b.ins().icmp_imm_s(IntCC::NotEqual, code, 0);
        let index_error = b.ins().iconst(I32, 2);
        let result = b.ins().select(failed, index_error, zero);
        let missing = b.ins().icmp_imm_s(IntCC::Equal, code, i64::from(heron_jit::codegen::MISSING_ROUTINE));
        let context_error = b.ins().iconst(I32, 4);
        let result = b.ins().select(missing, context_error, result);
        b.ins().return_(&[result]);
        b.switch_to_block(fail);
        let argument_error = b.ins().iconst(I32, 1);
        b.ins().return_(&[argument_error]);
        b.switch_to_block(too_small);
        let size_error = b.ins().iconst(I32, 3);
        b.ins().return_(&[size_error]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    module.define_function(id, &mut ctx).map_err(|e| AotError::Object(format!("entry '{name}': {e:?}")))?;
    Ok(())
}

/// Continues in a fresh block when `p` is non-NULL and `align`-aligned, else jumps to `fail`.
fn branch_if_bad(b: &mut FunctionBuilder<'_>, p: Value, align: u64, fail: cranelift_codegen::ir::Block) {
    let ok = b.create_block();
    let is_null = b.ins().icmp_imm_s(IntCC::Equal, p, 0);
    let low = b.ins().band_imm_s(p, (align.max(1) - 1) as i64);
    let misaligned = b.ins().icmp_imm_s(IntCC::NotEqual, low, 0);
    let bad = b.ins().bor(is_null, misaligned);
    b.ins().brif(bad, fail, &[], ok, &[]);
    b.switch_to_block(ok);
}
