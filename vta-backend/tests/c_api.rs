//! Builds `tests/c_api.c` with the system C compiler against the cdylib cargo left next to this
//! test's executable (`target/<profile>/deps/libheron_vta.so`) and runs it.

use std::path::PathBuf;

use heron_vta::driver::Driver;
use std::process::Command;

#[test]
fn c_program_drives_the_c_abi() {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let lib = deps.join("libheron_vta.so");
    assert!(lib.exists(), "{} missing: cargo builds the cdylib with the test", lib.display());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::Builder::new().prefix("heron-vta-c-api-").tempdir().unwrap();
    let exe = tmp.path().join("c_api");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let out = Command::new(cc)
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(root.join("tests/c_api.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(&deps)
        .arg(format!("-Wl,-rpath,{}", deps.display()))
        .arg("-lheron_vta")
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc failed: {}", String::from_utf8_lossy(&out.stderr));
    // cargo's LD_LIBRARY_PATH may list target/<profile> (a stale copy from `cargo build`) first.
    let run = |args: &[&str], limit: Option<&str>| {
        let mut command = Command::new(&exe);
        command.args(args).env_remove("HERON_VTA_DRIVER").env("LD_LIBRARY_PATH", &deps);
        match limit {
            Some(l) => command.env("HERON_VTA_WORK_LIMIT", l),
            None => command.env_remove("HERON_VTA_WORK_LIMIT"),
        };
        let out = command.output().expect("run the C program");
        (
            out.status.success(),
            format!("{args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let runs = [run(&[], None), run(&["work-limit-from-environment"], Some("5000"))];
    let _ = std::fs::remove_file(&exe);
    for (ok, output) in runs {
        assert!(ok, "C program failed: {output}");
    }
}

/// A driver loaded from a shared library (here the cdylib itself: a separate copy of the
/// simulator behind VTA's driver C API) runs the runtime's streams like the built-in one.
#[test]
fn runtime_runs_on_a_dynamically_loaded_driver() {
    use heron_vta::driver::{DynamicDriver, SimDriver};
    use heron_vta::runtime::{CommandQueue, DEFAULT_WAIT_CYCLES, KernelRecorder};
    use heron_vta::{AluOp, HwConfig, Isa, MemId};

    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let lib = deps.join("libheron_vta.so");
    let isa = Isa::new(HwConfig::default()).unwrap();
    let run = |driver: &mut dyn Driver| -> Vec<u8> {
        let mut q = CommandQueue::new(isa.clone(), driver).unwrap();
        let acc = driver.mem_alloc(4 * 64, true).unwrap();
        let out = driver.mem_alloc(4 * 16, true).unwrap();
        let values: Vec<u8> = (0..64i32).flat_map(|i| (i * 1000 - 30000).to_le_bytes()).collect();
        driver.copy_from_host(acc.virt, &values).unwrap();
        q.load_buffer_2d(driver, acc.phys, 0, 4, 1, 4, 0, 0, 0, 0, 0, MemId::Acc as u32).unwrap();
        let mut k = KernelRecorder::default();
        k.loop_begin(4, 1, 1, 0);
        k.push(1, false, 0, 0, 0, AluOp::Shr as u32, true, 7);
        k.loop_end();
        q.push_kernel(&k.finish().unwrap()).unwrap();
        q.dep_push(2, 3).unwrap();
        q.dep_pop(2, 3).unwrap();
        q.store_buffer_2d(driver, 0, MemId::Out as u32, out.phys, 0, 4, 1, 4).unwrap();
        q.synchronize(driver, DEFAULT_WAIT_CYCLES).unwrap();
        let mut got = vec![0u8; 64];
        driver.copy_to_host(&mut got, out.virt).unwrap();
        got
    };
    let mut dynamic = DynamicDriver::load(lib.to_str().unwrap()).expect("load the driver library");
    let mut builtin = SimDriver::new(isa.clone());
    let (a, b) = (run(&mut dynamic), run(&mut builtin));
    assert_eq!(a, b);
    assert_eq!(a[1] as i8, ((1000 - 30000) >> 7) as i8);
    assert!(DynamicDriver::load("/nonexistent/driver.so").is_err());
}
