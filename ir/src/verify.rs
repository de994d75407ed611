//! The graph verifier: checks every structural and typing invariant and reports all violations,
//! not just the first.

use std::collections::HashMap;
use std::fmt;

use crate::graph::{Graph, ValueId};
use crate::infer::infer_types;

/// Every problem the verifier found, one message each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct VerifyErrors(pub Vec<String>);

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A broken graph of 100,000 nodes must not make a megabyte-long message.
        const SHOWN: usize = 20;
        write!(f, "graph is invalid ({} problems): {}", self.0.len(), self.0[..self.0.len().min(SHOWN)].join("; "))?;
        if self.0.len() > SHOWN {
            write!(f, "; and {} more", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}

/// Checks that the graph is well formed: ids in range, every value defined once before use,
/// unique names, every type within the graph's limits, constants matching their declared types,
/// output types equal to what inference says, graph outputs defined.
pub fn verify(graph: &Graph) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    let n_values = graph.values.len();
    let valid = |id: ValueId| id.0 < n_values;

    let mut names: HashMap<&str, usize> = HashMap::new();
    for v in &graph.values {
        *names.entry(v.name.as_str()).or_default() += 1;
        if let Err(e) = graph.limits.check(&v.ty) {
            errors.push(format!("value '{}': {e}", v.name));
        }
        if let Some(c) = &v.constant
            && c.tensor_type() != v.ty
        {
            errors.push(format!("constant '{}' holds {} but is declared {}", v.name, c.tensor_type(), v.ty));
        }
    }
    let mut dups: Vec<&str> = names.iter().filter(|(_, n)| **n > 1).map(|(k, _)| *k).collect();
    dups.sort();
    for d in dups {
        errors.push(format!("value name '{d}' is used more than once"));
    }

    // defined[v]: the value may be read at this point of the node list.
    let mut defined = vec![false; n_values];
    for (i, v) in graph.values.iter().enumerate() {
        defined[i] = v.constant.is_some();
    }
    for &i in &graph.inputs {
        if !valid(i) {
            errors.push(format!("graph input id {} out of range", i.0));
            continue;
        }
        if graph.values[i.0].constant.is_some() {
            errors.push(format!("graph input '{}' is also a constant", graph.values[i.0].name));
        }
        defined[i.0] = true;
    }

    for node in &graph.nodes {
        let label = format!("node '{}' ({})", node.name, node.op);
        let mut ok = true;
        for &i in &node.inputs {
            if !valid(i) {
                errors.push(format!("{label}: input id {} out of range", i.0));
                ok = false;
            } else if !defined[i.0] {
                errors.push(format!("{label}: input '{}' is not defined before the node", graph.values[i.0].name));
                ok = false;
            }
        }
        for &o in &node.outputs {
            if !valid(o) {
                errors.push(format!("{label}: output id {} out of range", o.0));
                ok = false;
            } else if defined[o.0] {
                errors.push(format!("{label}: output '{}' is defined twice", graph.values[o.0].name));
                ok = false;
            }
        }
        if node.outputs.is_empty() {
            errors.push(format!("{label}: has no outputs"));
        }
        if ok {
            let tys: Vec<_> = node.inputs.iter().map(|&i| graph.ty(i)).collect();
            match infer_types(&node.op, &tys) {
                Err(e) => errors.push(format!("{label}: {e}")),
                Ok(inferred) => {
                    if node.outputs.len() > inferred.len() {
                        errors.push(format!(
                            "{label}: has {} outputs, the op produces at most {}",
                            node.outputs.len(),
                            inferred.len()
                        ));
                    }
                    for (&o, want) in node.outputs.iter().zip(&inferred) {
                        if graph.ty(o) != want {
                            errors.push(format!(
                                "{label}: output '{}' is declared {} but inference gives {want}",
                                graph.values[o.0].name,
                                graph.ty(o)
                            ));
                        }
                    }
                }
            }
        }
        for &o in &node.outputs {
            if valid(o) {
                defined[o.0] = true;
            }
        }
    }

    if graph.outputs.is_empty() {
        errors.push("graph has no outputs".into());
    }
    for &o in &graph.outputs {
        if !valid(o) {
            errors.push(format!("graph output id {} out of range", o.0));
        } else if !defined[o.0] {
            errors.push(format!("graph output '{}' is never defined", graph.values[o.0].name));
        }
    }

    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors(errors)) }
}
