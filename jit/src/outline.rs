//! Splits operator functions into one function per top-level loop nest, so each nest can be
//! split across threads on its own (a function runs once per chunk of its parallel loop a
//! thread takes, with everything around it, see [`ForKind::Parallel`](heron_ir::loop_ir::ForKind)). A convolution
//! that pads its input into scratch first becomes `conv.0` (the padding) and `conv.1` (the
//! convolution); the scratch becomes an allocation of `main` passed to both, planned like any
//! intermediate tensor, with its layout transform moved along.

use std::collections::{BTreeSet, HashMap, HashSet};

use heron_ir::loop_ir::{Arg, Buffer, BufferId, Call, Callee, IndexMap, MAIN, Module, PrimFunc, Scope, Stmt};

/// Splits every unclaimed operator function whose body is local allocations, global scratch
/// allocations and two or more loop nests, and rewrites `main`'s calls to call the parts in
/// order.
pub fn split_loop_nests(module: &mut Module) {
    let Some(main_index) = module.funcs.iter().position(|f| f.name == MAIN) else { return };
    let mut func_names: HashSet<String> = module.funcs.iter().map(|f| f.name.clone()).collect();
    let mut splits: HashMap<String, Split> = HashMap::new();
    let mut new_funcs = Vec::with_capacity(module.funcs.len());
    for (k, f) in std::mem::take(&mut module.funcs).into_iter().enumerate() {
        if k == main_index || f.target.is_some() {
            new_funcs.push(f);
            continue;
        }
        match split(&f).filter(|(parts, _)| parts.iter().all(|p| !func_names.contains(&p.name))) {
            Some((parts, calls)) => {
                func_names.extend(parts.iter().map(|p| p.name.clone()));
                new_funcs.extend(parts);
                splits.insert(f.name.clone(), calls);
            }
            None => new_funcs.push(f),
        }
    }
    module.funcs = new_funcs;
    if splits.is_empty() {
        return;
    }
    let main_index = module.funcs.iter().position(|f| f.name == MAIN).expect("main is kept");
    let main = &mut module.funcs[main_index];
    let mut buffer_names: HashSet<String> = main.buffers.iter().map(|b| b.name.clone()).collect();
    let mut out = Vec::new();
    for s in main.take_body() {
        let Stmt::Evaluate(Call { callee: Callee::Func(name), args }) = &s else {
            out.push(s);
            continue;
        };
        let Some(split) = splits.get(name) else {
            out.push(s);
            continue;
        };
        // The original's scratch buffers, now allocated by main for this call.
        let mut scratch: HashMap<BufferId, BufferId> = HashMap::new();
        for part in &split.parts {
            let mut part_args = Vec::with_capacity(part.sources.len());
            for source in &part.sources {
                part_args.push(match *source {
                    Source::Param(position) => args[position].clone(),
                    Source::Scratch(b) => {
                        let id = *scratch.entry(b).or_insert_with(|| {
                            let (buffer, layout) = &split.scratch[&b];
                            let mut buffer = buffer.clone();
                            buffer.name = unique_name(&mut buffer_names, &format!("{name}.{}", buffer.name));
                            main.buffers.push(buffer);
                            let id = BufferId((main.buffers.len() - 1) as u32);
                            if let Some(map) = layout {
                                main.layout_transforms.insert(id, map.clone());
                            }
                            out.push(Stmt::Allocate { buffer: id, pools: vec![] });
                            id
                        });
                        Arg::Buffer(id)
                    }
                });
            }
            out.push(Stmt::Evaluate(Call { callee: Callee::Func(part.name.clone()), args: part_args }));
        }
    }
    main.body = Stmt::Seq(out);
}

/// Where a part's parameter comes from at the call.
#[derive(Clone, Copy)]
enum Source {
    /// The original function's parameter at this position.
    Param(usize),
    /// A global scratch buffer of the original function.
    Scratch(BufferId),
}

/// How `main` calls the parts of a split function.
struct Split {
    /// The parts in order: name and where each parameter comes from.
    parts: Vec<PartCall>,
    /// The original's scratch buffers (by the original's ids) and their layout transforms,
    /// which move to main's allocations and reach the parts from there.
    scratch: HashMap<BufferId, (Buffer, Option<IndexMap>)>,
}

struct PartCall {
    name: String,
    sources: Vec<Source>,
}

fn split(f: &PrimFunc) -> Option<(Vec<PrimFunc>, Split)> {
    let Stmt::Seq(items) = &f.body else { return None };
    let mut locals = Vec::new();
    let mut scratch = BTreeSet::new();
    let mut nests = Vec::new();
    for s in items {
        match s {
            Stmt::Allocate { buffer, .. } if f.buffer(*buffer).scope == Scope::Local => locals.push(s.clone()),
            Stmt::Allocate { buffer, .. } => {
                scratch.insert(*buffer);
            }
            Stmt::For { .. } => nests.push(s.clone()),
            _ => return None,
        }
    }
    if nests.len() < 2 {
        return None;
    }
    let mut funcs = Vec::with_capacity(nests.len());
    let mut parts = Vec::with_capacity(nests.len());
    for (k, nest) in nests.into_iter().enumerate() {
        let used: BTreeSet<BufferId> = nest.buffers_used().into_iter().collect();
        // Parts keep the original's buffer table, so buffer ids mean the same in all of them.
        let mut func = f.clone();
        func.name = format!("{}.{k}", f.name);
        let mut sources = Vec::new();
        func.params.clear();
        for (position, &p) in f.params.iter().enumerate() {
            if used.contains(&p) {
                func.params.push(p);
                sources.push(Source::Param(position));
            }
        }
        for &b in scratch.iter().filter(|b| used.contains(b)) {
            func.params.push(b);
            sources.push(Source::Scratch(b));
        }
        let local_allocs =
            locals.iter().filter(|s| matches!(s, Stmt::Allocate { buffer, .. } if used.contains(buffer)));
        func.body = Stmt::Seq(local_allocs.cloned().chain(std::iter::once(nest)).collect());
        // Transforms of parameters stay (they also hold for the caller's tensor).
        func.layout_transforms.retain(|b, _| func.params.contains(b) && !scratch.contains(b));
        parts.push(PartCall { name: func.name.clone(), sources });
        funcs.push(func);
    }
    let scratch = scratch.iter().map(|&b| (b, (f.buffer(b).clone(), f.layout_transforms.get(&b).cloned()))).collect();
    Some((funcs, Split { parts, scratch }))
}

/// `base`, or `base_K` for the first free K; recorded as taken.
fn unique_name(taken: &mut HashSet<String>, base: &str) -> String {
    let name = if taken.contains(base) {
        (1..).map(|k| format!("{base}_{k}")).find(|n| !taken.contains(n)).expect("some suffix is free")
    } else {
        base.to_string()
    };
    taken.insert(name.clone());
    name
}
