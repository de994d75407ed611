//! Writes the adversarial corpus (`heron_ir::testing::adversarial`) to a folder, one
//! `NAME.onnx` per case plus `NAME.input<i>.npy` for its inputs, for running the CLI on it by
//! hand or from scripts: `cargo run --release --example adversarial_corpus -- DIR [--full]`.

use std::path::PathBuf;

use heron_ir::npy::write_npy;
use heron_ir::testing::adversarial::{Scale, corpus};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!("usage: adversarial_corpus DIR [--full]"))?);
    let scale = if args.next().as_deref() == Some("--full") { Scale::FULL } else { Scale::CI };
    std::fs::create_dir_all(&dir)?;
    for case in corpus(scale) {
        std::fs::write(dir.join(format!("{}.onnx", case.name)), &case.model)?;
        for (i, t) in case.inputs.iter().enumerate() {
            write_npy(&dir.join(format!("{}.input{i}.npy", case.name)), t)?;
        }
    }
    Ok(())
}
