//! Builds `tests/c_api.c` with the system C compiler against the cdylib cargo left next to this
//! test's executable (`target/<profile>/deps/libheron_vta.so`) and runs it.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_drives_the_c_abi() {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let lib = deps.join("libheron_vta.so");
    assert!(lib.exists(), "{} missing: cargo builds the cdylib with the test", lib.display());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("heron-vta-c-api-{}", std::process::id()));
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
    let run = Command::new(&exe)
        .env_remove("HERON_VTA_DRIVER")
        .env("LD_LIBRARY_PATH", &deps)
        .output()
        .expect("run the C program");
    let _ = std::fs::remove_file(&exe);
    assert!(
        run.status.success(),
        "C program failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}
