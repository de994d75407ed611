//! The VTA target: the second [`Target`] of the pipeline, applied before the CPU's. For each
//! region of the partition it replaces the operator calls `main` makes for the region's nodes by
//! one call of a function `vta_region_K` (target `vta`) whose body calls the routine
//! `heron_vta_region` with the region's program and buffers:
//!
//! ```text
//! func vta_region_3(program: u8[...], x: i8[1, 64, 56, 56], w: i8[64, 64, 3, 3], bias: i32[4, 1, 16], y: i8[...]) target vta {
//!   call extern heron_vta_region(program, x, w, bias, y, y)
//! }
//! ```
//!
//! The activations it touches get the packed layout in `main` (carried to every CPU operator
//! that reads or writes them), weights get the packed weight layout, biases are packed here,
//! and the program is a constant. Memory planning then keeps every buffer the region touches
//! in pools the `vta` target reaches. A graph input or output a region touches is staged
//! through a copy (its layout is the caller's).

use std::collections::HashSet;
use std::sync::Arc;

use heron_ir::loop_ir::build::FuncBuilder;
use heron_ir::loop_ir::target::{Target, TargetError};
use heron_ir::loop_ir::{Arg, BufferId, Call, Callee, Expr, IndexMap, MAIN, Module, PrimFunc, Scope, Stmt};
use heron_ir::{DType, Graph, Tensor};
use heron_vta::HwConfig;
use heron_vta::region::SLOTS;

use crate::CompileError;
use crate::conv::emit_conv;
use crate::eltwise::emit_add;
use crate::layout::{activation_map, conv_weight_map, dense_weight_map, packed_bias};
use crate::partition::{Partition, RegionKind};

/// The routine every region function calls.
pub const ROUTINE: &str = heron_vta::region::ROUTINE;
/// The target name recorded on region functions and in pool targets.
pub const TARGET: &str = "vta";

/// What one slot of a region call passes.
#[derive(Clone, Debug)]
enum SlotArg {
    /// An int8 activation (graph value), packed.
    Activation { value: String, rank: usize },
    /// A weight constant (graph value) with its packed layout.
    Weight { value: String, map: IndexMap },
    /// A bias, packed already.
    Bias(Arc<Tensor>),
}

/// A region compiled: its program and how `main` passes it its buffers.
#[derive(Clone, Debug)]
pub struct RegionPlan {
    /// The region function's name.
    pub func: String,
    /// The region's name (its anchor node).
    pub region: String,
    /// Values computed inside the region (never materialised).
    internal: Vec<String>,
    slots: Vec<SlotArg>,
    /// The slot the region writes.
    output_slot: usize,
    pub program: Arc<Tensor>,
}

/// The VTA target for one hardware configuration and one partitioned graph.
#[derive(Clone, Debug)]
pub struct VtaTarget {
    pub config: HwConfig,
    pub plans: Vec<RegionPlan>,
}

impl VtaTarget {
    /// Compiles every region of `partition` (of `graph`): programs, packed biases, layouts.
    pub fn new(graph: &Graph, partition: &Partition, config: &HwConfig) -> Result<VtaTarget, CompileError> {
        let mut plans = Vec::with_capacity(partition.regions.len());
        let name = |v| graph.value(v).name.clone();
        for (k, r) in partition.regions.iter().enumerate() {
            let internal = r
                .nodes
                .iter()
                .flat_map(|&n| graph.nodes[n].outputs.iter().copied())
                .filter(|&v| v != r.output)
                .map(name)
                .collect();
            let output = Activation(name(r.output), graph.ty(r.output).shape.len());
            let (program, slots, output_slot) = match &r.kind {
                RegionKind::Conv { x, weight, bias, shape, requant, dense } => {
                    let program = emit_conv(&r.name, shape, bias.is_some(), *requant, config)?;
                    let map = if *dense { dense_weight_map(config) } else { conv_weight_map(config) };
                    let bias = match bias {
                        Some(b) => graph.constant(*b).map(|t| packed_bias(t, shape.o, config)),
                        None => None,
                    };
                    let bias = bias.unwrap_or_else(|| {
                        packed_bias(&Tensor::from_vec::<i32>(&[0], vec![]).expect("empty"), shape.o, config)
                    });
                    let slots = vec![
                        SlotArg::Activation { value: name(*x), rank: graph.ty(*x).shape.len() },
                        SlotArg::Weight { value: name(*weight), map },
                        SlotArg::Bias(Arc::new(bias)),
                        output.slot(),
                    ];
                    (program, slots, 3)
                }
                RegionKind::Add { a, b, shifts, requant } => {
                    let program = emit_add(&r.name, &graph.ty(*a).shape, *shifts, *requant, config)?;
                    let slots = vec![
                        SlotArg::Activation { value: name(*a), rank: graph.ty(*a).shape.len() },
                        SlotArg::Activation { value: name(*b), rank: graph.ty(*b).shape.len() },
                        output.slot(),
                    ];
                    (program, slots, 2)
                }
            };
            let bytes = program.to_bytes()?;
            let program = Tensor::from_vec(&[bytes.len()], bytes).expect("1-D");
            plans.push(RegionPlan {
                func: format!("vta_region_{k}"),
                region: r.name.clone(),
                internal,
                slots,
                output_slot,
                program: Arc::new(program),
            });
        }
        Ok(VtaTarget { config: *config, plans })
    }
}

struct Activation(String, usize);

impl Activation {
    fn slot(&self) -> SlotArg {
        SlotArg::Activation { value: self.0.clone(), rank: self.1 }
    }
}

impl Target for VtaTarget {
    fn name(&self) -> &str {
        TARGET
    }

    fn apply(&self, module: &mut Module) -> Result<(), TargetError> {
        let err = |message: String| TargetError { target: TARGET.into(), message };
        let mut removed: HashSet<String> = HashSet::new();
        let mut added = Vec::new();
        let main = module.funcs.iter_mut().find(|f| f.name == MAIN).ok_or_else(|| err("no main".into()))?;
        for plan in &self.plans {
            let (funcs, callees) = rewrite_region(main, plan, &self.config).map_err(err)?;
            removed.extend(callees);
            added.extend(funcs);
        }
        drop_unused(main);
        module.funcs.retain(|f| !removed.contains(&f.name));
        // Region functions go before main, as the operator functions do.
        let at = module.funcs.iter().position(|f| f.name == MAIN).unwrap_or(module.funcs.len());
        for (k, f) in added.into_iter().enumerate() {
            module.funcs.insert(at + k, f);
        }
        Ok(())
    }
}

/// A function `name(src, dst)` copying a tensor of `shape` element by element (both sides
/// logical, so either may carry a layout).
fn copy_func(name: &str, dtype: DType, shape: &[usize]) -> PrimFunc {
    let mut fb = FuncBuilder::new(name);
    let src = fb.param("src", dtype, shape.to_vec());
    let dst = fb.param("dst", dtype, shape.to_vec());
    let body = fb.loop_nest("i", shape, |_, o| Stmt::Store {
        buffer: dst,
        indices: o.to_vec(),
        value: Expr::load(src, o.to_vec()),
    });
    fb.finish(body)
}

/// Rewrites `main` for one region; returns the region function (and staging copies) and the
/// operator functions it replaces.
fn rewrite_region(
    main: &mut PrimFunc,
    plan: &RegionPlan,
    config: &HwConfig,
) -> Result<(Vec<PrimFunc>, Vec<String>), String> {
    let internal: HashSet<BufferId> = plan.internal.iter().filter_map(|n| main.find_buffer(n)).collect();
    let mut stmts = main.take_body();
    let touches = |s: &Stmt| match s {
        Stmt::Evaluate(Call { callee: Callee::Func(_), args }) => {
            args.iter().any(|a| matches!(a, Arg::Buffer(b) if internal.contains(b)))
        }
        _ => false,
    };
    let calls: Vec<usize> = (0..stmts.len()).filter(|&i| touches(&stmts[i])).collect();
    let Some(&last) = calls.last() else {
        main.body = Stmt::Seq(stmts);
        return Err(format!("region '{}': main has no calls computing it", plan.region));
    };
    let callees: Vec<String> = calls
        .iter()
        .filter_map(|&i| match &stmts[i] {
            Stmt::Evaluate(Call { callee: Callee::Func(name), .. }) => Some(name.clone()),
            _ => None,
        })
        .collect();

    // The region function's parameters and main's arguments, slot by slot.
    let mut fb = FuncBuilder::new(plan.func.as_str());
    let program_len = plan.program.len();
    let program_param = fb.param("program", DType::U8, vec![program_len]);
    let program_buf = new_buffer(main, &format!("{}_program", plan.func), DType::U8, vec![program_len]);
    let mut before = vec![Stmt::AllocateConst { buffer: program_buf, data: plan.program.clone(), pools: vec![] }];
    let mut after = Vec::new();
    let mut args = vec![Arg::Buffer(program_buf)];
    let mut params = Vec::new();
    let mut new_funcs = Vec::new();
    for (s, slot) in plan.slots.iter().enumerate() {
        let (buffer, param) = match slot {
            SlotArg::Activation { value, rank } => {
                let b =
                    main.find_buffer(value).ok_or_else(|| format!("region '{}': no buffer '{value}'", plan.region))?;
                let map = activation_map(*rank, config).ok_or_else(|| format!("rank-{rank} activation"))?;
                let (dtype, shape) = (main.buffer(b).dtype, main.buffer(b).shape.clone());
                // Graph inputs and outputs keep the caller's layout: stage them.
                let b = if main.params.contains(&b) {
                    let staged = new_buffer(main, &format!("{}_{value}_packed", plan.func), dtype, shape.clone());
                    let copy = format!("{}_copy_{s}", plan.func);
                    let (from, to) = if s == plan.output_slot { (staged, b) } else { (b, staged) };
                    new_funcs.push(copy_func(&copy, dtype, &shape));
                    let call = Stmt::Evaluate(Call {
                        callee: Callee::Func(copy),
                        args: vec![Arg::Buffer(from), Arg::Buffer(to)],
                    });
                    before.push(Stmt::Allocate { buffer: staged, pools: vec![] });
                    if s == plan.output_slot {
                        after.push(call)
                    } else {
                        before.push(call)
                    }
                    staged
                } else {
                    b
                };
                match main.layout_transforms.get(&b) {
                    Some(m) if *m != map => return Err(format!("'{value}' already has another layout")),
                    _ => {
                        main.layout_transforms.insert(b, map);
                    }
                }
                (b, fb.param(&format!("slot{s}"), dtype, shape))
            }
            SlotArg::Weight { value, map } => {
                let b =
                    main.find_buffer(value).ok_or_else(|| format!("region '{}': no weight '{value}'", plan.region))?;
                match main.layout_transforms.get(&b) {
                    Some(m) if m != map => return Err(format!("weight '{value}' already has another layout")),
                    _ => {
                        main.layout_transforms.insert(b, map.clone());
                    }
                }
                let (dtype, shape) = (main.buffer(b).dtype, main.buffer(b).shape.clone());
                (b, fb.param(&format!("slot{s}"), dtype, shape))
            }
            SlotArg::Bias(t) => {
                let b = new_buffer(main, &format!("{}_bias", plan.func), DType::I32, t.shape().to_vec());
                before.push(Stmt::AllocateConst { buffer: b, data: t.clone(), pools: vec![] });
                (b, fb.param(&format!("slot{s}"), DType::I32, t.shape().to_vec()))
            }
        };
        args.push(Arg::Buffer(buffer));
        params.push(param);
    }
    // Unused slots repeat the output (never addressed: their extent is 0).
    let mut routine_args = vec![Arg::Buffer(program_param)];
    routine_args.extend((0..SLOTS).map(|s| Arg::Buffer(params[if s < params.len() { s } else { plan.output_slot }])));
    let body = Stmt::Evaluate(Call { callee: Callee::Extern(ROUTINE.into()), args: routine_args });
    let mut func = fb.finish(body);
    func.target = Some(TARGET.into());

    // Main: the region's calls and internal allocations go; staging, constants and the call
    // come where the last of them was.
    let mut out = Vec::with_capacity(stmts.len() + before.len() + after.len());
    for (i, s) in stmts.drain(..).enumerate() {
        if i == last {
            out.append(&mut before);
            out.push(Stmt::Evaluate(Call { callee: Callee::Func(plan.func.clone()), args: args.clone() }));
            out.append(&mut after);
        } else if calls.contains(&i) {
            continue;
        } else if let Stmt::Allocate { buffer, .. } = &s
            && internal.contains(buffer)
        {
            continue;
        } else {
            out.push(s);
        }
    }
    main.body = Stmt::Seq(out);
    new_funcs.insert(0, func);
    Ok((new_funcs, callees))
}

/// Removes `main`'s allocations and constants nothing uses any more (the float-side operands
/// of the replaced calls: zero points, unpacked biases).
fn drop_unused(main: &mut PrimFunc) {
    let stmts = main.take_body();
    let declares = |s: &Stmt| match s {
        Stmt::Allocate { buffer, .. } | Stmt::AllocateConst { buffer, .. } => Some(*buffer),
        _ => None,
    };
    let mut used: HashSet<BufferId> = main.params.iter().copied().collect();
    for s in stmts.iter().filter(|s| declares(s).is_none()) {
        used.extend(s.buffers_used());
    }
    main.body = Stmt::Seq(stmts.into_iter().filter(|s| declares(s).is_none_or(|b| used.contains(&b))).collect());
}

fn new_buffer(f: &mut PrimFunc, name: &str, dtype: DType, shape: Vec<usize>) -> BufferId {
    f.buffers
        .push(heron_ir::loop_ir::Buffer { scope: Scope::Global, ..heron_ir::loop_ir::Buffer::new(name, dtype, shape) });
    BufferId((f.buffers.len() - 1) as u32)
}
