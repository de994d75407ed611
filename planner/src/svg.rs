//! The memory map as SVG: one panel per pool, time on x, offset on y, one rectangle per buffer
//! with its name, size, offset, live range and operator on hover.

use std::fmt::Write;

use crate::extract::Extracted;
use crate::types::{Plan, PoolInfo};

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn memory_map_svg(problem: &Extracted, pools: &[PoolInfo], plan: &Plan) -> String {
    let (width, panel_h, margin) = (1000.0f64, 300.0f64, 40.0f64);
    let steps = problem.ranges.iter().flatten().map(|r| r.1).max().unwrap_or(1).max(1) as f64;
    let used: Vec<usize> = (0..pools.len()).filter(|&p| plan.pool_sizes[p] > 0).collect();
    let height = margin + used.len() as f64 * (panel_h + margin);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="11">"#,
        width + 2.0 * margin
    );
    for (k, &p) in used.iter().enumerate() {
        let top = margin + k as f64 * (panel_h + margin);
        let size = plan.pool_sizes[p].max(1) as f64;
        let _ = writeln!(
            out,
            r#"<text x="{margin}" y="{}">pool {} — {} bytes</text>"#,
            top - 6.0,
            escape(&pools[p].name),
            plan.pool_sizes[p]
        );
        let _ = writeln!(
            out,
            r##"<rect x="{margin}" y="{top}" width="{width}" height="{panel_h}" fill="none" stroke="#888"/>"##
        );
        for (i, b) in problem.buffers.iter().enumerate() {
            let a = &plan.allocations[i];
            if a.pool != p {
                continue;
            }
            for &(s, e) in &problem.ranges[i] {
                let x = margin + width * s as f64 / steps;
                let w = (width * (e - s) as f64 / steps).max(1.0);
                let y = top + panel_h * (1.0 - (a.offset + b.size_bytes) as f64 / size);
                let h = (panel_h * b.size_bytes as f64 / size).max(1.0);
                let op = problem.steps.get(s as usize).map_or("", |s| s.as_str());
                let hue = (i * 47) % 360;
                let _ = writeln!(
                    out,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="hsl({hue},60%,65%)" stroke="black" stroke-width="0.3"><title>{} — {} bytes at offset {}, live [{s}, {e}), operator {}</title></rect>"#,
                    escape(&b.name),
                    b.size_bytes,
                    a.offset,
                    escape(op)
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}
