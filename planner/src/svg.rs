//! The memory map as SVG, readable without being told what it shows: one panel per pool, drawn
//! with its name and size. Workspace pools put operators (time) on x and offsets in bytes on y,
//! both axes labelled with units and ticks; each buffer is a rectangle over its live range, named
//! where the name fits (hover for name, size, offset, live range and operator), the pool's proven
//! lower bound a dashed line. Constants live for the whole run, so their pool is one compact
//! bar, bytes along x, the largest constants named. A legend explains the marks.

use std::fmt::Write;

use crate::extract::Extracted;
use crate::types::{Budget, Plan, PoolInfo, PoolKind};

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `bytes` in B, KiB, MiB or GiB with up to three significant figures.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// Per pool, a proven lower bound on its size given the buffers `plan` put there: the peak of
/// live bytes where conflicts are live ranges, else the bound search within a fixed budget.
pub fn pool_lower_bounds(problem: &Extracted, pools: &[PoolInfo], plan: &Plan) -> Vec<u64> {
    (0..pools.len())
        .map(|p| {
            let members: Vec<usize> = (0..problem.buffers.len()).filter(|&i| plan.allocations[i].pool == p).collect();
            // A pool holds one kind: listed conflicts, or conflicts implied by live ranges.
            if members.iter().any(|&i| problem.implied[i]) {
                let sizes: Vec<u64> = members.iter().map(|&i| problem.buffers[i].size_bytes).collect();
                let ranges: Vec<(u64, u64)> = members.iter().filter_map(|&i| problem.buffers[i].live_range).collect();
                crate::bound::max_load(&sizes, &ranges)
            } else {
                let sub = crate::PoolProblem::from_buffers(&problem.buffers, &members, None);
                crate::bound::lower_bound(&sub, &Budget::work(crate::json::BOUND_WORK))
            }
        })
        .collect()
}

/// "Nice" tick spacing: 1, 2 or 5 times a power of ten (of bytes or steps) giving at most
/// `max_ticks` ticks over `span`.
fn tick_step(span: f64, max_ticks: f64) -> f64 {
    let raw = (span / max_ticks).max(1.0);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|&s| s >= raw).unwrap_or(10.0 * power)
}

/// Roughly how wide `text` is at 11 px sans-serif.
fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * 6.2
}

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 30.0;
const PANEL_H: f64 = 320.0;
const CONST_H: f64 = 46.0;

/// Colour of buffer `i`: spread around the hue circle.
fn fill(i: usize) -> String {
    format!("hsl({},55%,68%)", (i * 47) % 360)
}

/// The SVG of `plan` (see the module documentation).
pub fn memory_map_svg(problem: &Extracted, pools: &[PoolInfo], plan: &Plan) -> String {
    let bounds = pool_lower_bounds(problem, pools, plan);
    let steps = problem.ranges.iter().flatten().map(|r| r.1).max().unwrap_or(1).max(1);
    let used: Vec<usize> = (0..pools.len()).filter(|&p| plan.pool_sizes[p] > 0).collect();
    let mut body = String::new();
    let mut y = 60.0;
    for &p in &used {
        let members: Vec<usize> = (0..problem.buffers.len()).filter(|&i| plan.allocations[i].pool == p).collect();
        let whole_run = members.iter().all(|&i| problem.constant[i]);
        if pools[p].kind == PoolKind::Constant || whole_run {
            y = constant_panel(&mut body, problem, plan, p, &pools[p], &members, y);
        } else {
            y = workspace_panel(&mut body, problem, plan, (p, &pools[p], bounds[p]), &members, steps, y);
        }
    }
    y = legend(&mut body, y);
    let mut out = String::new();
    let total_w = LEFT + WIDTH + RIGHT;
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{y:.0}" viewBox="0 0 {total_w} {y:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text class="title" x="{LEFT}" y="28" font-size="16" font-weight="bold">Memory plan: {} buffers in {} pools (algorithm {})</text>"#,
        problem.buffers.len(),
        used.len(),
        escape(&plan.algorithm)
    );
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// A rectangle's name inside it (left-aligned, vertically centred) when it fits; the rest show
/// it on hover only.
fn label(out: &mut String, name: &str, (x, y, w, h): (f64, f64, f64, f64)) {
    if text_width(name) + 6.0 <= w && h >= 13.0 {
        let _ = write!(
            out,
            r#"<text class="buffer-name" x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
            x + 3.0,
            y + h / 2.0 + 4.0,
            escape(name)
        );
    }
}

/// Ticks along an x axis at `bottom` covering `0..=max`, at most about `max_ticks` of them,
/// labelled by `text`.
fn x_ticks(
    out: &mut String,
    bottom: f64,
    max: u64,
    max_ticks: f64,
    x_of: impl Fn(u64) -> f64,
    text: impl Fn(u64) -> String,
) {
    let step = (tick_step(max as f64, max_ticks) as u64).max(1);
    let mut tick = 0u64;
    while tick <= max {
        let tx = x_of(tick);
        let _ = writeln!(
            out,
            r##"<line class="tick" x1="{tx:.1}" y1="{bottom:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#444"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bottom + 5.0,
            bottom + 17.0,
            text(tick)
        );
        tick += step;
    }
}

/// Opens a pool's panel group (closed by the caller) with its title: name, kind, size, `detail`.
fn open_panel(out: &mut String, pool: &PoolInfo, kind: &str, size: u64, top: f64, detail: &str) {
    let name = escape(&pool.name);
    let _ = writeln!(
        out,
        r#"<g class="pool" data-name="{name}" data-kind="{kind}" data-size="{size}"><text class="pool-title" x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">pool {name} ({}): {} ({size} bytes), {}</text>"#,
        top + 14.0,
        pool.kind,
        human_bytes(size),
        escape(detail)
    );
}

/// A workspace pool: time on x, offset on y. Returns the y where the next panel starts.
fn workspace_panel(
    out: &mut String,
    problem: &Extracted,
    plan: &Plan,
    (p, pool, lower_bound): (usize, &PoolInfo, u64),
    members: &[usize],
    steps: u64,
    top: f64,
) -> f64 {
    let size = plan.pool_sizes[p].max(1);
    let panel_top = top + 24.0;
    let x_of = |step: u64| LEFT + WIDTH * step as f64 / steps as f64;
    let y_of = |bytes: u64| panel_top + PANEL_H * (1.0 - bytes as f64 / size as f64);
    open_panel(out, pool, "workspace", plan.pool_sizes[p], top, &format!("lower bound {}", human_bytes(lower_bound)));
    let _ = writeln!(
        out,
        r##"<rect class="frame" x="{LEFT}" y="{panel_top:.1}" width="{WIDTH}" height="{PANEL_H}" fill="#fafafa" stroke="#444"/>"##
    );
    // y axis: bytes.
    let step = tick_step(size as f64, 6.0) as u64;
    let mut tick = 0u64;
    while tick <= size {
        let ty = y_of(tick);
        let _ = writeln!(
            out,
            r##"<line class="tick" x1="{:.1}" y1="{ty:.1}" x2="{LEFT}" y2="{ty:.1}" stroke="#444"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT - 5.0,
            LEFT - 8.0,
            ty + 4.0,
            human_bytes(tick)
        );
        tick += step.max(1);
    }
    let _ = writeln!(
        out,
        r#"<text class="axis-label" transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">offset (bytes)</text>"#,
        panel_top + PANEL_H / 2.0
    );
    // x axis: operator steps, the operator's name under the first tick of each.
    let bottom = panel_top + PANEL_H;
    x_ticks(out, bottom, steps, 10.0, x_of, |tick| tick.to_string());
    let _ = writeln!(
        out,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">operator step (time) →</text>"#,
        LEFT + WIDTH / 2.0,
        bottom + 34.0
    );
    for &i in members {
        let (b, a) = (&problem.buffers[i], &plan.allocations[i]);
        for &(s, e) in &problem.ranges[i] {
            let (x, w) = (x_of(s), (x_of(e) - x_of(s)).max(1.0));
            let (y, h) = (y_of(a.offset + b.size_bytes), (PANEL_H * b.size_bytes as f64 / size as f64).max(1.0));
            let op = problem.steps.get(s as usize).map_or("", |s| s.as_str());
            let _ = write!(
                out,
                r#"<g class="buffer"><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}" stroke="black" stroke-width="0.4"><title>{} — {} ({} bytes) at offset {}, live [{s}, {e}), written by {}</title></rect>"#,
                fill(i),
                escape(&b.name),
                human_bytes(b.size_bytes),
                b.size_bytes,
                a.offset,
                escape(op)
            );
            label(out, &b.name, (x, y, w, h));
            out.push_str("</g>\n");
        }
    }
    if lower_bound > 0 {
        let ly = y_of(lower_bound);
        let _ = writeln!(
            out,
            r##"<line class="lower-bound" x1="{LEFT}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="#c00" stroke-width="1.5" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" fill="#c00" text-anchor="end">lower bound {}</text>"##,
            LEFT + WIDTH,
            LEFT + WIDTH - 4.0,
            ly - 4.0,
            human_bytes(lower_bound)
        );
    }
    out.push_str("</g>\n");
    bottom + 60.0
}

/// A pool of constants (live for the whole run): one bar, bytes on x, the constants in offset
/// order, named where the name fits. Returns the y where the next panel starts.
fn constant_panel(
    out: &mut String,
    problem: &Extracted,
    plan: &Plan,
    p: usize,
    pool: &PoolInfo,
    members: &[usize],
    top: f64,
) -> f64 {
    let size = plan.pool_sizes[p].max(1);
    let bar_top = top + 24.0;
    let x_of = |bytes: u64| LEFT + WIDTH * bytes as f64 / size as f64;
    let detail = format!("{} constants, live for the whole run", members.len());
    open_panel(out, pool, "constants", plan.pool_sizes[p], top, &detail);
    let mut sorted = members.to_vec();
    sorted.sort_by_key(|&i| plan.allocations[i].offset);
    for &i in &sorted {
        let (b, a) = (&problem.buffers[i], &plan.allocations[i]);
        let (x, w) = (x_of(a.offset), (WIDTH * b.size_bytes as f64 / size as f64).max(0.5));
        let _ = write!(
            out,
            r#"<g class="buffer"><rect x="{x:.1}" y="{bar_top:.1}" width="{w:.1}" height="{CONST_H}" fill="{}" stroke="black" stroke-width="0.2"><title>{} — {} ({} bytes) at offset {}</title></rect>"#,
            fill(i),
            escape(&b.name),
            human_bytes(b.size_bytes),
            b.size_bytes,
            a.offset
        );
        label(out, &b.name, (x, bar_top, w, CONST_H));
        out.push_str("</g>\n");
    }
    let bottom = bar_top + CONST_H;
    x_ticks(out, bottom, size, 8.0, x_of, human_bytes);
    let _ = writeln!(
        out,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">offset (bytes) →</text></g>"#,
        LEFT + WIDTH / 2.0,
        bottom + 34.0
    );
    bottom + 60.0
}

/// What the marks mean. Returns the SVG's height.
fn legend(out: &mut String, top: f64) -> f64 {
    let _ = writeln!(
        out,
        r##"<g class="legend"><text x="{LEFT}" y="{:.1}" font-weight="bold">Legend</text><rect x="{LEFT}" y="{:.1}" width="24" height="12" fill="{}" stroke="black" stroke-width="0.4"/><text x="{:.1}" y="{:.1}">a buffer: its bytes (height) over the operator steps it is live (width); hover for details</text><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#c00" stroke-width="1.5" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}">the pool's proven lower bound: no plan needs less</text><rect x="{LEFT}" y="{:.1}" width="24" height="12" fill="{}" stroke="black" stroke-width="0.2"/><text x="{:.1}" y="{:.1}">constants: live for the whole run, laid end to end by offset</text></g>"##,
        top,
        top + 10.0,
        fill(3),
        LEFT + 32.0,
        top + 20.0,
        top + 36.0,
        LEFT + 24.0,
        top + 36.0,
        LEFT + 32.0,
        top + 40.0,
        top + 50.0,
        fill(7),
        LEFT + 32.0,
        top + 60.0
    );
    top + 80.0
}
