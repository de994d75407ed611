//! Workspace-size query (seed 002): the scratch bytes each PrimFunc allocates, both without
//! sharing and with its own allocations sharing memory when their live ranges do not overlap.
//!
//! Live ranges are measured over the function's top-level statements: a buffer is live from the
//! first statement that touches it to the last (a whole loop nest counts as one statement).
//! Constants are not workspace. Offsets in the shared layout are aligned to
//! [`WORKSPACE_ALIGNMENT`] bytes.

use std::collections::HashMap;

use super::{BufferId, Module, PrimFunc, Stmt};

/// Alignment of every scratch buffer in the shared layout (one cache line).
pub const WORKSPACE_ALIGNMENT: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceSize {
    pub func: String,
    /// Size when every allocation gets its own (aligned) space, in allocation order.
    pub unshared_bytes: usize,
    /// Size when allocations whose live ranges do not overlap share memory.
    pub shared_bytes: usize,
}

/// Buffers a statement declares or uses: a declared but unused allocation still gets a span.
fn touched(s: &Stmt, out: &mut Vec<BufferId>) {
    s.walk(&mut |st| {
        if let Stmt::Allocate { buffer, .. } | Stmt::AllocateConst { buffer, .. } = st {
            out.push(*buffer);
        }
    });
    out.extend(s.buffers_used());
}

/// Live interval `[first, last]` (top-level statement indices) and size of every workspace
/// allocation of `f`, in allocation order.
pub fn allocation_intervals(f: &PrimFunc) -> Vec<(BufferId, usize, usize, usize)> {
    let top: Vec<&Stmt> = match &f.body {
        Stmt::Seq(v) => v.iter().collect(),
        s => vec![s],
    };
    let mut allocs: Vec<BufferId> = Vec::new();
    f.body.walk(&mut |s| {
        if let Stmt::Allocate { buffer, .. } = s {
            allocs.push(*buffer);
        }
    });
    let mut span: HashMap<BufferId, (usize, usize)> = HashMap::new();
    for (k, s) in top.iter().enumerate() {
        let mut used = Vec::new();
        touched(s, &mut used);
        for b in used {
            let e = span.entry(b).or_insert((k, k));
            e.1 = k;
        }
    }
    allocs
        .into_iter()
        .map(|b| {
            let (first, last) = span.get(&b).copied().unwrap_or((0, 0));
            (b, first, last, f.buffer(b).size_bytes())
        })
        .collect()
}

/// Scratch needs of one function.
pub fn workspace_size(f: &PrimFunc) -> WorkspaceSize {
    let intervals = allocation_intervals(f);
    let unshared_bytes = intervals.iter().fold(0usize, |end, i| end.next_multiple_of(WORKSPACE_ALIGNMENT) + i.3);
    // First fit in decreasing size order over the live intervals.
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(intervals[i].3));
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (first, last, offset, size)
    let mut shared_bytes = 0;
    for i in order {
        let (_, first, last, size) = intervals[i];
        let mut busy: Vec<(usize, usize)> =
            placed.iter().filter(|p| p.0 <= last && first <= p.1).map(|p| (p.2, p.2 + p.3)).collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (start, end) in busy {
            if offset + size <= start {
                break;
            }
            offset = offset.max(end.next_multiple_of(WORKSPACE_ALIGNMENT));
        }
        placed.push((first, last, offset, size));
        shared_bytes = shared_bytes.max(offset + size);
    }
    // Sharing never costs more than not sharing: the unshared layout is a valid plan too.
    WorkspaceSize { func: f.name.clone(), unshared_bytes, shared_bytes: shared_bytes.min(unshared_bytes) }
}

/// Workspace sizes of every function of the module, in module order.
pub fn module_workspace(m: &Module) -> Vec<WorkspaceSize> {
    m.funcs.iter().map(workspace_size).collect()
}
