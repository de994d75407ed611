//! Loop IR: the seed 001 worked examples, index maps and their errors, printer/parser round
//! trips, the verifier, the simplifier, flattening and the workspace-size query.

mod common;

use heron_ir::loop_ir::analysis::VarRanges;
use heron_ir::loop_ir::build::{FuncBuilder, add, floordiv, floormod, idx, mul};
use heron_ir::loop_ir::flatten::{flatten, flatten_func};
use heron_ir::loop_ir::index_map::IndexMapError;
use heron_ir::loop_ir::layout::{LayoutError, apply_func, apply_layout_transforms, set_layout};
use heron_ir::loop_ir::parse::parse_module;
use heron_ir::loop_ir::print::{ConstData, print_func, print_module};
use heron_ir::loop_ir::simplify::simplify;
use heron_ir::loop_ir::verify::{verify_func, verify_module};
use heron_ir::loop_ir::workspace::workspace_size;
use heron_ir::loop_ir::{Expr, IndexMap, Module, PrimFunc, Scope, Stmt, VarId};
use heron_ir::onnx::{ImportOptions, load_model};
use heron_ir::{DType, lower, passes};

/// A function over one buffer `x` of `shape` with a load at `load` and a store at `store`.
fn load_store_func(shape: &[usize], load: &[i64], store: &[i64]) -> PrimFunc {
    let mut fb = FuncBuilder::new("f");
    let x = fb.buffer("x", DType::F32, shape.to_vec(), Scope::Global);
    let y = fb.param("y", DType::F32, vec![1]);
    let to = |v: &[i64]| v.iter().map(|&i| idx(i)).collect::<Vec<_>>();
    let body = Stmt::Seq(vec![
        Stmt::Allocate { buffer: x, pools: vec![] },
        Stmt::Store { buffer: x, indices: to(store), value: Expr::float(7.0, DType::F32) },
        Stmt::Store { buffer: y, indices: vec![idx(0)], value: Expr::load(x, to(load)) },
    ]);
    fb.finish(body)
}

fn indices_of(f: &PrimFunc) -> (Vec<Expr>, Vec<Expr>) {
    let Stmt::Seq(v) = &f.body else { panic!("seq body") };
    let Stmt::Store { indices: store, .. } = &v[1] else { panic!("store") };
    let Stmt::Store { value: Expr::Load { indices: load, .. }, .. } = &v[2] else { panic!("load") };
    (load.clone(), store.clone())
}

#[test]
fn seed_example_flat_2d_buffer() {
    let mut f = load_store_func(&[64, 128], &[10, 15], &[20, 23]);
    flatten_func(&mut f);
    assert_eq!(f.buffers[0].shape, vec![64 * 128]);
    assert_eq!(indices_of(&f), (vec![idx(10 * 128 + 15)], vec![idx(20 * 128 + 23)]));
}

#[test]
fn seed_example_transpose_then_flatten() {
    let mut f = load_store_func(&[64, 128], &[10, 15], &[20, 23]);
    f.layout_transforms.insert(f.find_buffer("x").unwrap(), IndexMap::parse("lambda i, j: [j, i]").unwrap());
    apply_func(&mut f).unwrap();
    assert_eq!(f.buffers[0].shape, vec![128, 64]);
    assert_eq!(indices_of(&f), (vec![idx(15), idx(10)], vec![idx(23), idx(20)]));
    flatten_func(&mut f);
    assert_eq!(indices_of(&f), (vec![idx(15 * 64 + 10)], vec![idx(23 * 64 + 20)]));
}

#[test]
fn seed_example_nhwc_to_nchwc() {
    let map = IndexMap::parse("lambda n, h, w, c: [n, c // 4, h, w, c % 4]").unwrap();
    let shape = [16, 64, 64, 128];
    let t = map.transformed_shape(&shape).unwrap();
    assert_eq!(t, vec![16, 32, 64, 64, 4]);
    let want = 32 * 64 * 64 * 4 * 11 + 64 * 64 * 4 * (101 / 4) + 64 * 4 * 37 + 4 * 23 + 101 % 4;
    assert_eq!(map.physical_index(&t, &[11, 37, 23, 101]), vec![want]);

    let mut f = load_store_func(&shape, &[11, 37, 23, 101], &[0, 0, 0, 0]);
    f.layout_transforms.insert(f.find_buffer("x").unwrap(), map);
    apply_func(&mut f).unwrap();
    assert_eq!(indices_of(&f).0, vec![idx(11), idx(25), idx(37), idx(23), idx(1)]);
    flatten_func(&mut f);
    assert_eq!(indices_of(&f).0, vec![idx(want)]);
}

#[test]
fn seed_example_nchwc_with_axis_separator() {
    let map = IndexMap::parse("lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4]").unwrap();
    assert_eq!(map.axis_separators, vec![3]);
    let shape = [16, 64, 64, 128];
    let t = map.transformed_shape(&shape).unwrap();
    assert_eq!(map.physical_shape(&t), vec![16 * 32 * 64, 64 * 4]);
    let want = vec![32 * 64 * 11 + 64 * (101 / 4) + 37, 4 * 23 + 101 % 4];
    assert_eq!(map.physical_index(&t, &[11, 37, 23, 101]), want);

    let mut f = load_store_func(&shape, &[11, 37, 23, 101], &[0, 0, 0, 0]);
    f.layout_transforms.insert(f.find_buffer("x").unwrap(), map);
    apply_func(&mut f).unwrap();
    flatten_func(&mut f);
    assert_eq!(f.buffers[0].shape, vec![16 * 32 * 64, 64 * 4]);
    assert_eq!(f.buffers[0].axis_separators, vec![0], "flattened N-d buffers keep range(N-1)");
    assert_eq!(indices_of(&f).0, want.iter().map(|&i| idx(i)).collect::<Vec<_>>());
    let again = f.clone();
    flatten_func(&mut f);
    assert_eq!(f, again, "flattening twice changes nothing");
}

#[test]
fn splits_that_do_not_divide_pad_the_buffer() {
    let map = IndexMap::parse("lambda c: [c // 4, c % 4]").unwrap();
    assert_eq!(map.transformed_shape(&[14]).unwrap(), vec![4, 4]);
    map.check_injective(&[14]).unwrap();
}

#[test]
fn index_map_errors_are_clear() {
    let err = |text: &str, shape: &[usize]| -> IndexMapError {
        match IndexMap::parse(text) {
            Err(e) => e,
            Ok(m) => m.check_injective(shape).unwrap_err(),
        }
    };
    assert!(matches!(err("lambda i, j: [i + j]", &[4, 4]), IndexMapError::NotInjective { .. }));
    assert!(matches!(err("lambda i: [i // 2]", &[4]), IndexMapError::NotInjective { .. }));
    assert!(matches!(err("lambda i, j: [i, j]", &[4]), IndexMapError::RankMismatch { vars: 2, rank: 1 }));
    assert!(matches!(err("lambda i: [k]", &[4]), IndexMapError::UnknownVariable(v) if v == "k"));
    assert!(matches!(err("lambda i: [i, ", &[4]), IndexMapError::Parse { .. }));
    assert!(matches!(err("lamda i: [i]", &[4]), IndexMapError::Parse { .. }));
    assert!(matches!(err("lambda i: [i / 2]", &[4]), IndexMapError::Parse { .. }));
    assert!(matches!(err("lambda i: [i * i]", &[4]), IndexMapError::NotAffine(_)));
    assert!(matches!(err("lambda i: [i - 3]", &[4]), IndexMapError::Negative { .. }));
    let msg = err("lambda i, j: [i + j]", &[4, 4]).to_string();
    assert!(msg.contains("not injective"), "{msg}");
}

#[test]
fn transform_on_an_unknown_buffer_is_an_error() {
    let mut m = Module { funcs: vec![load_store_func(&[4], &[0], &[1])] };
    let map = IndexMap::parse("lambda i: [i]").unwrap();
    assert!(matches!(set_layout(&mut m, "f", "nope", map.clone()), Err(LayoutError::UnknownBuffer { .. })));
    assert!(matches!(set_layout(&mut m, "g", "x", map), Err(LayoutError::UnknownFunction(_))));
}

#[test]
fn index_maps_print_and_parse_back() {
    for text in [
        "lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4]",
        "lambda i, j, k: [i * 64 + j, k // 4, k % 4]",
        "lambda a, b: [b, (a + 1) // 2 - 1, a % 2]",
    ] {
        let m = IndexMap::parse(text).unwrap();
        assert_eq!(IndexMap::parse(&m.to_string()).unwrap(), m, "{text} -> {m}");
    }
}

fn lowered(name: &str) -> Module {
    let dir = common::shared_dir().join("reference");
    let mut g = load_model(&dir.join(format!("{name}.onnx")), &ImportOptions::default()).unwrap();
    passes::optimize(&mut g);
    lower::lower(&g).unwrap()
}

#[test]
fn printer_and_parser_round_trip() {
    for name in ["lenet", "mlp"] {
        let mut m = lowered(name);
        for _ in 0..2 {
            let text = print_module(&m, ConstData::Full);
            let back = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            for (a, b) in back.funcs.iter().zip(&m.funcs) {
                if a != b {
                    let (x, y) = (format!("{a:?}"), format!("{b:?}"));
                    let at = x.chars().zip(y.chars()).position(|(p, q)| p != q).unwrap_or(0);
                    panic!(
                        "{name}: function {} differs after a round trip at: {} vs {}",
                        b.name,
                        &x[at.saturating_sub(150)..(at + 80).min(x.len())],
                        &y[at.saturating_sub(150)..(at + 80).min(y.len())]
                    );
                }
            }
            assert_eq!(back, m, "{name}");
            assert_eq!(print_module(&back, ConstData::Full), text);
            apply_layout_transforms(&mut m).unwrap();
            flatten(&mut m);
        }
    }
}

#[test]
fn parse_errors_name_line_and_column() {
    let bad = [
        ("func @f(%x: f32[4]) {\n  %x[0] = %y\n}", "unknown variable"),
        ("func @f(%x: f33[4]) {\n}", "unknown dtype"),
        ("func @f(%x: f32[4]) {\n  for %i: i64 in 0..4 sideways {\n  }\n}", "loop kind"),
        ("func @f(%x: f32[4]) {\n  %x[0] = (f32(1.0) $ f32(2.0))\n}", "unexpected character"),
        ("func @f(%x: f32[4]) {\n  %x[0] = f32(1.0)\n", "end of input"),
    ];
    for (text, needle) in bad {
        let e = parse_module(text).unwrap_err();
        assert!(e.to_string().contains(needle), "{text}: {e}");
        assert!(e.line >= 1 && e.column >= 1);
    }
}

#[test]
fn bitwise_operators_print_parse_and_run_on_integers_only() {
    let text = "func @main(%a: u8[2], %b: u8[2], %y: u8[6]) {
  for %i: i64 in 0..2 serial {
    %y[%i] = (%a[%i] & %b[%i])
    %y[(%i + 2)] = (%a[%i] | %b[%i])
    %y[(%i + 4)] = (%a[%i] ^ %b[%i])
  }
}";
    let m = parse_module(text).unwrap();
    verify_module(&m).unwrap();
    assert_eq!(print_module(&m, ConstData::Full).trim(), text);
    let a = heron_ir::Tensor::from_vec::<u8>(&[2], vec![0b1100_1010, 0xff]).unwrap();
    let b = heron_ir::Tensor::from_vec::<u8>(&[2], vec![0b1010_0110, 0x0f]).unwrap();
    let y = heron_ir::loop_ir::interp::run(&m, &[a, b]).unwrap().remove(0);
    assert_eq!(
        y.as_array::<u8>().unwrap().as_slice().unwrap(),
        &[0b1000_0010, 0x0f, 0b1110_1110, 0xff, 0b0110_1100, 0xf0]
    );
    let floats = parse_module("func @f(%x: f32[1]) {\n  %x[0] = (f32(1.0) & f32(2.0))\n}").unwrap();
    assert!(verify_module(&floats).unwrap_err().to_string().contains("BitAnd is not defined on f32"));
}

#[test]
fn verifier_reports_every_problem() {
    let text = "func @f(%x: f32[4, 4], %y: i32[4]) {
  for %i: i64 in 0..4 serial {
    %x[%i] = f32(1.0)
    %y[%i] = f32(2.0)
  }
  %y[0] = i32(1)
}";
    let m = parse_module(text).unwrap();
    let mut f = m.funcs[0].clone();
    // A use of the loop variable outside its loop.
    let Stmt::Seq(v) = &mut f.body else { panic!() };
    v.push(Stmt::Store { buffer: f.params[1], indices: vec![Expr::Var(VarId(0))], value: Expr::int(0, DType::I32) });
    let errors = verify_func(&f, None).unwrap_err().0;
    assert!(errors.iter().any(|e| e.contains("uses 1 indices, the buffer has rank 2")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("store of f32 into i32")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("outside its scope")), "{errors:?}");
    assert_eq!(errors.len(), 3, "{errors:?}");
    let calls = parse_module("func @main(%a: f32[4]) {\n  call @missing(%a)\n}").unwrap();
    assert!(verify_module(&calls).unwrap_err().to_string().contains("unknown function 'missing'"));
}

#[test]
fn simplifier_reads_like_hand_written_indices() {
    let mut fb = FuncBuilder::new("s");
    let a = fb.var("a", DType::I64);
    let b = fb.var("b", DType::I64);
    let f = fb.finish(Stmt::Seq(vec![]));
    let mut ranges = VarRanges::new(2);
    ranges.set(a, Some((0, 9)));
    ranges.set(b, Some((0, 3)));
    let (va, vb) = (Expr::Var(a), Expr::Var(b));
    let e = floordiv(add(mul(va.clone(), idx(4)), vb.clone()), idx(4));
    assert_eq!(simplify(e, &f, &ranges), va);
    let e = floormod(add(mul(va.clone(), idx(4)), vb.clone()), idx(4));
    assert_eq!(simplify(e, &f, &ranges), vb);
    assert_eq!(simplify(floordiv(va.clone(), idx(1)), &f, &ranges), va);
    assert_eq!(simplify(add(mul(idx(2), idx(3)), idx(4)), &f, &ranges), idx(10));
    let e = add(mul(add(mul(va.clone(), idx(8)), vb.clone()), idx(16)), idx(0));
    let text = print_func(&FuncBuilder::new("t").finish(Stmt::Seq(vec![])), ConstData::Elided);
    assert!(text.contains("func @t"));
    assert_eq!(simplify(e, &f, &ranges), add(mul(va, idx(128)), mul(vb, idx(16))));
}

#[test]
fn workspace_sizes_with_and_without_sharing() {
    let text = "func @f(%x: f32[256], %y: f32[256]) {
  allocate %a: f32[256] pools []
  for %i: i64 in 0..256 serial {
    %a[%i] = %x[%i]
  }
  allocate %b: f32[128] pools []
  for %i2: i64 in 0..128 serial {
    %b[%i2] = %a[%i2]
  }
  allocate %c: f32[256] pools []
  for %i3: i64 in 0..256 serial {
    %c[%i3] = %b[(%i3 // 2)]
  }
  for %i4: i64 in 0..256 serial {
    %y[%i4] = %c[%i4]
  }
}";
    let m = parse_module(text).unwrap();
    verify_module(&m).unwrap();
    let w = workspace_size(&m.funcs[0]);
    assert_eq!(w.unshared_bytes, 1024 + 512 + 1024);
    // a and c never live together, so they share; b overlaps both.
    assert_eq!(w.shared_bytes, 1024 + 512);
}

#[test]
fn a_functions_target_prints_parses_and_verifies() {
    let text = "func @f(%x: f32[2]) {\n  target \"cpu\"\n  %x[0] = f32(1.0)\n}\n";
    let m = parse_module(text).unwrap();
    assert_eq!(m.funcs[0].target.as_deref(), Some("cpu"));
    assert_eq!(print_module(&m, ConstData::Elided), text);
    verify_module(&m).unwrap();
    let bad = parse_module(&text.replace("\"cpu\"", "\"c p u\"")).unwrap();
    let err = verify_module(&bad).unwrap_err().to_string();
    assert!(err.contains("target name \"c p u\" is not a plain identifier"), "{err}");
    assert!(parse_module(&text.replace("\"cpu\"", "cpu")).is_err(), "the name is quoted");
}

#[test]
fn loop_schedules_print_parse_and_verify() {
    let text = "func @f(%x: f32[8, 7], %y: f32[8, 7]) {
  for %j: i64 in 0..8 unrolled(4) {
    for %i: i64 in 0..7 vectorized(lanes=4, vectors=2, tail=clamp) {
      %y[%j, %i] = (%x[%j, %i] * f32(2.0))
    }
  }
}
";
    let m = parse_module(text).unwrap();
    assert_eq!(print_module(&m, ConstData::Elided), text);
    verify_module(&m).unwrap();
    for (bad, needle) in [
        ("unrolled(0)", "a count >= 1"),
        ("vectorized(lanes=4)", "expected `,`"),
        ("vectorized(lanes=4, vectors=2, tail=sideways)", "vector tail"),
    ] {
        let e = parse_module(&text.replace("unrolled(4)", bad)).unwrap_err();
        assert!(e.to_string().contains(needle), "{bad}: {e}");
    }
    // Schedules whose reordering or repeated iterations could change results are refused.
    let rejected = [
        (text.replace("lanes=4", "lanes=3"), "a power of two"),
        (text.replace("unrolled(4)", "unrolled(65)"), "more than 64"),
        (
            text.replace("vectors=2, tail=clamp", "vectors=1, tail=clamp"),
            "a clamped block needs a constant extent in 5..=4",
        ),
        (text.replace("%x[%j, %i] * f32(2.0)", "%y[%j, 0] * f32(2.0)"), "read no other iteration's output"),
        (text.replace("%y[%j, %i] =", "%y[0, %i] ="), "unroll-and-jam needs iterations that write different elements"),
        // An in-place update is fine for a vectorized loop, but not under a tail that repeats it.
        (text.replace("%x[%j, %i] * f32(2.0)", "%y[%j, %i] * f32(2.0)"), "reads none of the buffers it writes"),
    ];
    for (bad, needle) in rejected {
        let m = parse_module(&bad).unwrap();
        let err = verify_module(&m).unwrap_err().to_string();
        assert!(err.contains(needle), "{bad}\n{err}");
    }
    let scalar_tail = text.replace("vectors=2, tail=clamp", "vectors=1, tail=scalar");
    let in_place = scalar_tail.replace("%x[%j, %i] * f32(2.0)", "%y[%j, %i] * f32(2.0)");
    verify_module(&parse_module(&in_place).unwrap()).unwrap();
    let unrolled_unknown = "func @f(%x: f32[8], %n: i64[1]) {
  for %i: i64 in 0..%n[0] unrolled(2) {
    %x[%i] = f32(0.0)
  }
}";
    let err = verify_module(&parse_module(unrolled_unknown).unwrap()).unwrap_err().to_string();
    assert!(err.contains("an unrolled loop needs a constant extent"), "{err}");
}

#[test]
fn vector_tails_visit_in_the_emitted_order() {
    use heron_ir::loop_ir::{VectorShape, VectorTail};
    let shape = |vectors, tail| VectorShape { lanes: 4, vectors, tail };
    assert_eq!(shape(3, VectorTail::Overlap).visit_order(18), vec![0..12, 12..16, 14..18]);
    assert_eq!(shape(3, VectorTail::Overlap).visit_order(24), vec![0..24]);
    assert_eq!(shape(2, VectorTail::Clamp).visit_order(7), vec![0..4, 3..7]);
    assert_eq!(shape(4, VectorTail::Scalar).visit_order(18), vec![0..18]);
}
