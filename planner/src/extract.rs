//! Buffer-info extraction from the loop IR: one timeline across `main` and every function it
//! calls, so inter-operator tensors and operator scratch are planned together.
//!
//! Each top-level statement of a function is one time step; a call expands into its callee's
//! steps. A tensor `main` passes to an operator is live for the whole call; an operator's
//! scratch is live from the first to the last of its statements that touch it (a loop nest is
//! one statement). A function called twice keeps one offset for its scratch, so the scratch
//! conflicts with everything live during either call. Constants conflict only with each other.
//! `local` buffers (accumulators) are left to the code generator (registers or stack).
//!
//! Conflicts are listed only where that is cheap: constants (all live for the whole program,
//! so all in conflict) and, when more than [`MAX_LISTED_PAIRS`] pairs of workspace buffers are
//! live at once, the workspace buffers too, are marked `implied`: their conflicts are their
//! overlapping live ranges, and [`crate::sweep`] plans them without a list.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use heron_ir::loop_ir::workspace::allocation_intervals;
use heron_ir::loop_ir::{Arg, BufferId, Callee, MAIN, Module, PrimFunc, Scope, Stmt};

use crate::types::{BufferInfo, DEFAULT_TARGET, PlanError, PoolInfo, PoolKind, common_multiple};

/// Which buffer of which function a [`BufferInfo`] stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferRef {
    pub func: String,
    pub buffer: BufferId,
}

#[derive(Clone, Debug)]
pub struct ExtractOptions {
    /// Default candidate pools of workspace allocations (in preference order).
    pub workspace_pools: Vec<String>,
    /// Default candidate pools of constants.
    pub constant_pools: Vec<String>,
    /// Alignment of every planned buffer.
    pub alignment: u64,
}

impl Default for ExtractOptions {
    fn default() -> Self {
        ExtractOptions {
            workspace_pools: vec!["workspace".into()],
            constant_pools: vec!["constants".into()],
            alignment: 64,
        }
    }
}

/// The planning problem of a module.
#[derive(Clone, Debug)]
pub struct Extracted {
    pub buffers: Vec<BufferInfo>,
    pub refs: Vec<BufferRef>,
    /// Every live interval of every buffer (one per call for scratch of repeated callees).
    pub ranges: Vec<Vec<(u64, u64)>>,
    /// Whether each buffer is a constant.
    pub constant: Vec<bool>,
    /// Name of the operator function each time step belongs to.
    pub steps: Vec<String>,
    /// Buffers whose conflicts are their overlapping live ranges (the hull of their ranges, in
    /// `live_range`) instead of a list; see the module documentation.
    pub implied: Vec<bool>,
    /// The targets whose functions read or write each buffer (sorted; a function the target
    /// layer did not claim counts as the CPU's).
    pub targets: Vec<Vec<String>>,
}

/// The most pairs of live-at-once workspace buffers listed as conflicts: beyond this (more
/// than ~1,400 tensors live at once), the conflicts are implied by the live ranges.
pub const MAX_LISTED_PAIRS: u64 = 1_000_000;

struct Walker<'m> {
    funcs: HashMap<&'m str, &'m PrimFunc>,
    index: HashMap<BufferRef, usize>,
    out: Extracted,
    opts: &'m ExtractOptions,
    depth: usize,
}

impl Walker<'_> {
    fn declare(&mut self, f: &PrimFunc, b: BufferId, pools: &[String], constant: bool) -> Result<(), PlanError> {
        let buf = f.buffer(b);
        if buf.scope == Scope::Local {
            return Ok(());
        }
        let key = BufferRef { func: f.name.clone(), buffer: b };
        if self.index.contains_key(&key) {
            return Ok(());
        }
        let defaults = if constant { &self.opts.constant_pools } else { &self.opts.workspace_pools };
        let pool_candidates = if pools.is_empty() { defaults.clone() } else { pools.to_vec() };
        self.index.insert(key.clone(), self.out.buffers.len());
        self.out.buffers.push(BufferInfo {
            name: if f.name == MAIN { buf.name.clone() } else { format!("{}.{}", f.name, buf.name) },
            size_bytes: buf.size_bytes().max(1) as u64,
            alignment: self.opts.alignment,
            conflicts: vec![],
            pool_candidates,
            live_range: None,
        });
        self.out.refs.push(key);
        self.out.ranges.push(vec![]);
        self.out.constant.push(constant);
        self.out.targets.push(Vec::new());
        Ok(())
    }

    /// Records that `b` of `f` is live over `range`, and accessed there by `target` (`None`
    /// when the statements only pass it on to a callee).
    fn mark(&mut self, f: &PrimFunc, b: BufferId, range: (u64, u64), target: Option<&str>) {
        if let Some(&i) = self.index.get(&BufferRef { func: f.name.clone(), buffer: b }) {
            self.out.ranges[i].push(range);
            let targets = &mut self.out.targets[i];
            if let Some(t) = target
                && !targets.iter().any(|x| x == t)
            {
                targets.push(t.to_string());
                targets.sort();
            }
        }
    }

    /// Lays `f` out on the timeline from `t`; `args` maps its parameters to the caller's
    /// buffers. Returns the time after it.
    fn walk(&mut self, f: &PrimFunc, t: u64, args: &[(String, BufferId)]) -> Result<u64, PlanError> {
        if self.depth > 32 {
            return Err(PlanError::BadBuffer { buffer: f.name.clone(), reason: "call depth exceeds 32".into() });
        }
        let param_of: HashMap<BufferId, &(String, BufferId)> = f.params.iter().copied().zip(args.iter()).collect();
        let mut pending: Vec<(BufferId, Vec<String>, bool)> = Vec::new();
        f.body.walk(&mut |s| match s {
            Stmt::Allocate { buffer, pools } => pending.push((*buffer, pools.clone(), false)),
            Stmt::AllocateConst { buffer, pools, .. } => pending.push((*buffer, pools.clone(), true)),
            _ => {}
        });
        for (b, pools, constant) in &pending {
            self.declare(f, *b, pools, *constant)?;
        }
        let top: Vec<&Stmt> = match &f.body {
            Stmt::Seq(v) => v.iter().collect(),
            s => vec![s],
        };
        let start = t;
        let mut now = t;
        let mut spans: Vec<(u64, u64)> = Vec::with_capacity(top.len());
        let mut is_call: Vec<bool> = Vec::with_capacity(top.len());
        for s in &top {
            let begin = now;
            let call = match s {
                Stmt::Evaluate(call) => match &call.callee {
                    Callee::Func(name) => self.funcs.get(name.as_str()).map(|&callee| (call, callee)),
                    _ => None,
                },
                _ => None,
            };
            is_call.push(call.is_some());
            if let Some((call, callee)) = call {
                let resolved: Vec<(String, BufferId)> = call
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        Arg::Buffer(b) => Some(match param_of.get(b) {
                            Some(outer) => (*outer).clone(),
                            None => (f.name.clone(), *b),
                        }),
                        Arg::Expr(_) => None,
                    })
                    .collect();
                self.depth += 1;
                now = self.walk(callee, now, &resolved)?;
                self.depth -= 1;
            } else {
                self.out.steps.push(f.name.clone());
                now += 1;
            }
            now = now.max(begin + 1);
            spans.push((begin, now));
        }
        // Buffers of this function (and caller buffers reached through parameters) are live
        // from the first statement touching them to the end of the last one.
        let mut first_last: HashMap<BufferId, (u64, u64)> = HashMap::new();
        let mut accessed: HashSet<BufferId> = HashSet::new();
        for ((s, &(b, e)), &call) in top.iter().zip(&spans).zip(&is_call) {
            for id in s.buffers_used() {
                let entry = first_last.entry(id).or_insert((b, e));
                entry.1 = e;
                if !call {
                    accessed.insert(id);
                }
            }
        }
        let target = f.target.as_deref().unwrap_or(DEFAULT_TARGET);
        let scratch: HashMap<BufferId, ()> = allocation_intervals(f).into_iter().map(|(b, ..)| (b, ())).collect();
        for (id, range) in first_last {
            let by = accessed.contains(&id).then_some(target);
            match param_of.get(&id) {
                Some((owner, outer)) => {
                    let owner = self.funcs[owner.as_str()];
                    self.mark(owner, *outer, range, by);
                }
                None if scratch.contains_key(&id) || f.name == MAIN => self.mark(f, id, range, by),
                None => {}
            }
        }
        for (b, _, constant) in pending {
            if constant {
                self.mark(f, b, (start, now.max(start + 1)), None);
            }
        }
        Ok(now)
    }
}

/// Extracts the planning problem of `module` (lowered and flattened).
pub fn extract(module: &Module, opts: &ExtractOptions) -> Result<Extracted, PlanError> {
    let main = module
        .main()
        .ok_or_else(|| PlanError::BadBuffer { buffer: MAIN.into(), reason: "module has no main".into() })?;
    let mut w = Walker {
        funcs: module.by_name(),
        index: HashMap::new(),
        out: Extracted {
            buffers: vec![],
            refs: vec![],
            ranges: vec![],
            constant: vec![],
            steps: vec![],
            implied: vec![],
            targets: vec![],
        },
        opts,
        depth: 0,
    };
    let end = w.walk(main, 0, &[])?;
    let mut out = w.out;
    // Constants live for the whole program; unused buffers get one step where declared.
    for i in 0..out.buffers.len() {
        if out.constant[i] {
            out.ranges[i] = vec![(0, end.max(1))];
        } else if out.ranges[i].is_empty() {
            out.ranges[i] = vec![(0, 1)];
        }
        let r = &mut out.ranges[i];
        r.sort_unstable();
        let merged = r.iter().fold(Vec::<(u64, u64)>::new(), |mut acc, &(a, b)| {
            match acc.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => acc.push((a, b)),
            }
            acc
        });
        *r = merged;
        out.buffers[i].live_range = (r.len() == 1).then(|| r[0]);
    }
    // Conflicts: overlapping ranges, and only within one kind (constants vs workspace). Listed
    // for the workspace when that is cheap, implied otherwise (and always for constants).
    let mut events: Vec<(u64, u64, usize)> = out
        .ranges
        .iter()
        .enumerate()
        .filter(|(i, _)| !out.constant[*i])
        .flat_map(|(i, r)| r.iter().map(move |&(a, b)| (a, b, i)))
        .collect();
    events.sort_unstable();
    let listed = live_pairs(&events) <= MAX_LISTED_PAIRS;
    out.implied = out.constant.iter().map(|&c| c || !listed).collect();
    for (i, b) in out.buffers.iter_mut().enumerate() {
        if out.implied[i] {
            let r = &out.ranges[i];
            b.live_range = Some((r[0].0, r.iter().map(|x| x.1).max().unwrap_or(r[0].1)));
        }
    }
    if listed {
        let mut active: Vec<(u64, usize)> = Vec::new();
        let mut conflicts: Vec<Vec<usize>> = vec![Vec::new(); out.buffers.len()];
        for (a, b, i) in events {
            active.retain(|&(end, _)| end > a);
            for &(_, j) in &active {
                if j != i {
                    conflicts[i].push(j);
                    conflicts[j].push(i);
                }
            }
            active.push((b, i));
        }
        for (b, mut c) in out.buffers.iter_mut().zip(conflicts) {
            c.sort_unstable();
            c.dedup();
            b.conflicts = c;
        }
    }
    Ok(out)
}

/// The problem of `module` over `pools`: the pools of each kind are the default candidates, and
/// every buffer keeps only the candidates that all the targets touching it can reach (workspace
/// buffers need read-write access, constants read access); none left is an error.
pub fn extract_for_pools(module: &Module, pools: &[PoolInfo]) -> Result<Extracted, PlanError> {
    let names = |kind: PoolKind| pools.iter().filter(|p| p.kind == kind).map(|p| p.name.clone()).collect::<Vec<_>>();
    let opts = ExtractOptions {
        workspace_pools: names(PoolKind::Workspace),
        constant_pools: names(PoolKind::Constant),
        ..Default::default()
    };
    let mut problem = extract(module, &opts)?;
    for (i, b) in problem.buffers.iter_mut().enumerate() {
        let write = !problem.constant[i];
        let targets = &problem.targets[i];
        let reachable = |name: &String| {
            pools.iter().find(|p| &p.name == name).is_none_or(|p| targets.iter().all(|t| p.reachable_by(t, write)))
        };
        if !b.pool_candidates.iter().all(reachable) {
            let kept: Vec<String> = b.pool_candidates.iter().filter(|c| reachable(c)).cloned().collect();
            if kept.is_empty() {
                return Err(PlanError::NoPoolForTargets {
                    buffer: b.name.clone(),
                    access: if write { "written" } else { "read" },
                    targets: targets.join(", "),
                    pools: b.pool_candidates.join(", "),
                });
            }
            b.pool_candidates = kept;
        }
        // A pool's alignment holds for the buffers in it too (an accelerator addresses its
        // memory in elements of its own size).
        for pool in b.pool_candidates.iter().filter_map(|c| pools.iter().find(|p| &p.name == c)) {
            b.alignment = common_multiple(b.alignment, pool.alignment).ok_or_else(|| PlanError::BadBuffer {
                buffer: b.name.clone(),
                reason: format!(
                    "its alignment {} and pool '{}''s {} have no common multiple up to 2^62",
                    b.alignment, pool.name, pool.alignment
                ),
            })?;
        }
    }
    Ok(problem)
}

/// How many pairs of the (start-sorted) live ranges overlap: at each start, the ranges still
/// live. O(n log n), whatever the answer.
fn live_pairs(events: &[(u64, u64, usize)]) -> u64 {
    let mut ends: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut pairs = 0u64;
    for &(start, end, _) in events {
        while ends.peek().is_some_and(|Reverse(e)| *e <= start) {
            ends.pop();
        }
        pairs = pairs.saturating_add(ends.len() as u64);
        ends.push(Reverse(end));
    }
    pairs
}
