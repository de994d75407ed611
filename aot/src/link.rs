//! Link helpers: the system C compiler (`$CC`, else `cc`) builds shared libraries from objects
//! and C programs that link them; the object's imports are read back with the `object` crate.

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSymbol};

use crate::AotError;

/// The C compiler: `$CC` when set, else `cc`.
pub fn c_compiler() -> PathBuf {
    std::env::var_os("CC").map_or_else(|| PathBuf::from("cc"), PathBuf::from)
}

fn run(mut command: Command) -> Result<(), AotError> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|e| AotError::Tool { command: shown.clone(), output: e.to_string() })?;
    if output.status.success() {
        Ok(())
    } else {
        let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stdout));
        Err(AotError::Tool { command: shown, output: text.trim().to_string() })
    }
}

/// Links `objects` into the shared library `out` (`cc -shared ... -lm`).
pub fn link_shared(objects: &[&Path], out: &Path) -> Result<(), AotError> {
    let mut cc = Command::new(c_compiler());
    cc.arg("-shared").arg("-o").arg(out).args(objects).arg("-lm");
    run(cc)
}

/// Compiles and links a C program: `cc -O2 -std=c11 -I<include> sources... objects... -lm`.
pub fn build_c_program(sources: &[&Path], objects: &[&Path], include: &Path, out: &Path) -> Result<(), AotError> {
    build_c_program_with_runtime(sources, objects, None, include, out)
}

/// [`build_c_program`], also linking a Rust static library of Heron's runtime (e.g.
/// `libheron_threads.a` or `libheron_vta.a`) and the system libraries it needs
/// (`-lpthread -ldl`).
pub fn build_c_program_with_runtime(
    sources: &[&Path],
    objects: &[&Path],
    runtime: Option<&Path>,
    include: &Path,
    out: &Path,
) -> Result<(), AotError> {
    let mut cc = Command::new(c_compiler());
    cc.args(["-O2", "-std=c11", "-Wall", "-Werror"])
        .arg("-I")
        .arg(include)
        .arg("-o")
        .arg(out)
        .args(sources)
        .args(objects);
    if let Some(lib) = runtime {
        cc.arg(lib).args(["-lpthread", "-ldl"]);
    }
    cc.arg("-lm");
    run(cc)
}

/// The undefined symbols of an object file, sorted.
pub fn undefined_symbols(object_bytes: &[u8]) -> Result<Vec<String>, AotError> {
    let file = object::File::parse(object_bytes).map_err(|e| AotError::Object(e.to_string()))?;
    let mut names: Vec<String> = file
        .symbols()
        .filter(|s| s.is_undefined() && !s.name().unwrap_or_default().is_empty())
        .map(|s| s.name().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The global (exported) symbols an object defines, sorted.
pub fn exported_symbols(object_bytes: &[u8]) -> Result<Vec<String>, AotError> {
    let file = object::File::parse(object_bytes).map_err(|e| AotError::Object(e.to_string()))?;
    let mut names: Vec<String> = file
        .symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .map(|s| s.name().unwrap_or_default().to_string())
        .collect();
    names.sort();
    Ok(names)
}
