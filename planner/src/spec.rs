//! Pool flags as users write them: `NAME[:size_hint=BYTES][:targets=cpu,vta]` (shared by
//! `heron plan` and `heron compile`).

use crate::types::{Access, PlanError, PoolInfo, PoolKind};

/// Parses one pool flag. Workspace pools are read-write for their targets, parameter
/// (constant) pools read-only.
pub fn parse_pool_spec(text: &str, kind: PoolKind) -> Result<PoolInfo, PlanError> {
    let bad = |reason: String| PlanError::BadPool { pool: text.to_string(), reason };
    let mut parts = text.split(':');
    let name = parts.next().unwrap_or_default().trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') {
        return Err(bad("expected NAME[:size_hint=BYTES][:targets=cpu,vta] with a non-empty name of letters, digits, '_', '-' or '.'".into()));
    }
    let access = if kind == PoolKind::Constant { Access::ReadOnly } else { Access::ReadWrite };
    let mut pool = match kind {
        PoolKind::Workspace => PoolInfo::workspace(name, None),
        PoolKind::Constant => PoolInfo::constant(name, None),
    };
    for part in parts {
        let (key, value) = part.split_once('=').ok_or_else(|| bad(format!("'{part}' is not key=value")))?;
        match key.trim() {
            "size_hint" => {
                let v: u64 =
                    value.trim().parse().map_err(|_| bad(format!("size_hint '{value}' is not a byte count")))?;
                pool.size_hint_bytes = Some(v);
            }
            "targets" => {
                let targets: Vec<(String, Access)> = value.split(',').map(|t| (t.trim().to_string(), access)).collect();
                if targets.iter().any(|(t, _)| !matches!(t.as_str(), "cpu" | "vta")) {
                    return Err(bad(format!("targets '{value}': known targets are cpu and vta")));
                }
                pool.targets = targets;
            }
            other => return Err(bad(format!("unknown key '{other}' (known: size_hint, targets)"))),
        }
    }
    Ok(pool)
}
