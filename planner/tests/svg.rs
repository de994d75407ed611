//! `heron plan --svg`'s memory map, parsed and rendered to PNG (resvg): one panel per pool at
//! its size, axes with units, every buffer a rectangle with its details on hover and its name
//! where it fits, the lower bound as a line at the right height, constants as one bar, a legend.

use std::path::PathBuf;

use heron_ir::loop_ir::{flatten::flatten, layout::apply_layout_transforms};
use heron_ir::onnx::{ImportOptions, load_model};
use heron_planner::extract::{ExtractOptions, extract};
use heron_planner::svg::{human_bytes, memory_map_svg, pool_lower_bounds};
use heron_planner::{Budget, PoolInfo, algorithm, plan_extracted};

fn shared() -> PathBuf {
    std::env::var("HERON_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

#[test]
fn memory_map_renders_with_axes_names_bounds_and_legend() {
    let mut g = load_model(&shared().join("reference/lenet.onnx"), &ImportOptions::default()).unwrap();
    heron_ir::passes::optimize(&mut g);
    let mut m = heron_ir::lower::lower(&g).unwrap();
    apply_layout_transforms(&mut m).unwrap();
    flatten(&mut m);
    let problem = extract(&m, &ExtractOptions::default()).unwrap();
    let pools = vec![PoolInfo::workspace("workspace", None), PoolInfo::constant("constants", None)];
    let plan = plan_extracted(&problem, &pools, algorithm("auto").unwrap().as_ref(), &Budget::work(5_000_000)).unwrap();
    let svg = memory_map_svg(&problem, &pools, &plan);

    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let class = |n: &roxmltree::Node<'_, '_>, c: &str| n.attribute("class") == Some(c);
    let texts: Vec<String> =
        doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text().map(str::to_string)).collect();
    let has_text = |s: &str| texts.iter().any(|t| t.contains(s));
    assert!(has_text("offset (bytes)") && has_text("operator step (time)"), "axes with units: {texts:?}");
    assert!(has_text("Legend") && has_text("lower bound"), "{texts:?}");

    // One panel per pool, titled with its name and size.
    let panels: Vec<_> = doc.descendants().filter(|n| class(n, "pool")).collect();
    assert_eq!(panels.len(), 2);
    for (panel, (pool, &size)) in panels.iter().zip(pools.iter().zip(&plan.pool_sizes)) {
        assert_eq!(panel.attribute("data-name"), Some(pool.name.as_str()));
        assert_eq!(panel.attribute("data-size"), Some(size.to_string().as_str()));
        assert!(has_text(&format!("pool {} ({}): {}", pool.name, pool.kind, human_bytes(size))), "{texts:?}");
    }

    // Every buffer a rectangle with its details on hover; names shown where they fit.
    let buffers: Vec<_> = doc.descendants().filter(|n| class(n, "buffer")).collect();
    assert!(buffers.len() >= problem.buffers.len());
    for b in &buffers {
        let title = b.descendants().find(|n| n.has_tag_name("title")).and_then(|t| t.text()).unwrap_or("");
        assert!(title.contains("bytes) at offset"), "{title}");
    }
    let named = doc.descendants().filter(|n| class(n, "buffer-name")).count();
    assert!(named >= 3, "some buffers wide enough for their name: {named}");

    // The lower bound line sits at the bound's height in the workspace panel, drawn to scale.
    let bound = pool_lower_bounds(&problem, &pools, &plan)[0];
    let frame = doc.descendants().find(|n| class(n, "frame")).unwrap();
    let num = |n: &roxmltree::Node<'_, '_>, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    let (top, height) = (num(&frame, "y"), num(&frame, "height"));
    let line = doc.descendants().find(|n| class(n, "lower-bound")).expect("lower-bound line");
    let want = top + height * (1.0 - bound as f64 / plan.pool_sizes[0] as f64);
    assert!((num(&line, "y1") - want).abs() < 0.2, "line at {} for bound {bound}", num(&line, "y1"));

    // It renders: a picture of the right size, mostly white, with coloured buffers.
    let tree = resvg::usvg::Tree::from_str(&svg, &resvg::usvg::Options::default()).expect("usvg parses it");
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pixmap.as_mut());
    let pixels = pixmap.pixels();
    let coloured = pixels.iter().filter(|p| p.red() != p.green() || p.green() != p.blue()).count();
    assert!(coloured > pixels.len() / 50, "{coloured} coloured pixels of {}", pixels.len());
    let png = std::env::temp_dir().join("heron-memory-map-lenet.png");
    pixmap.save_png(&png).unwrap();
}
