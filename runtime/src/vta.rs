//! VTA for the executor's users: reading TVM's `vta_config.json` and turning a run's region
//! calls and counters into the per-region report (`heron run --target vta --stats FILE.json`).

use std::time::Instant;

use heron_vta::HwConfig;

use crate::compiler::VtaStats;
use crate::model::RuntimeError;

/// A hardware configuration from TVM's `vta_config.json` format: `LOG_INP_WIDTH`,
/// `LOG_WGT_WIDTH`, `LOG_ACC_WIDTH`, `LOG_BATCH`, `LOG_BLOCK` (or `LOG_BLOCK_IN` and
/// `LOG_BLOCK_OUT`), `LOG_UOP_BUFF_SIZE`, `LOG_INP_BUFF_SIZE`, `LOG_WGT_BUFF_SIZE`,
/// `LOG_ACC_BUFF_SIZE`; `TARGET` and `HW_VER` are accepted and not used. The result is
/// validated (the simulator's widths, SRAM index fields filling a 32-bit micro-op).
pub fn hw_config_from_json(text: &str) -> Result<HwConfig, RuntimeError> {
    let bad = |m: String| RuntimeError::Vta(heron_vta::VtaError::Config(m));
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let obj = json.as_object().ok_or_else(|| bad("not a JSON object".into()))?;
    let field = |key: &str| -> Result<Option<u32>, RuntimeError> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&v| v < 32)
                .map(|v| Some(v as u32))
                .ok_or_else(|| bad(format!("{key} must be a small non-negative integer, got {v}"))),
        }
    };
    let need = |key: &str| field(key)?.ok_or_else(|| bad(format!("{key} is missing")));
    let block = field("LOG_BLOCK")?;
    let block_in = field("LOG_BLOCK_IN")?.or(block).ok_or_else(|| bad("LOG_BLOCK is missing".into()))?;
    let block_out = field("LOG_BLOCK_OUT")?.or(block).ok_or_else(|| bad("LOG_BLOCK is missing".into()))?;
    let config = HwConfig {
        log_inp_width: need("LOG_INP_WIDTH")?,
        log_wgt_width: need("LOG_WGT_WIDTH")?,
        log_acc_width: need("LOG_ACC_WIDTH")?,
        log_batch: need("LOG_BATCH")?,
        log_block_in: block_in,
        log_block_out: block_out,
        log_uop_buff_size: need("LOG_UOP_BUFF_SIZE")?,
        log_inp_buff_size: need("LOG_INP_BUFF_SIZE")?,
        log_wgt_buff_size: need("LOG_WGT_BUFF_SIZE")?,
        log_acc_buff_size: need("LOG_ACC_BUFF_SIZE")?,
    };
    config.validate()?;
    Ok(config)
}

/// One region of a run as reported: the VTA regions are the calls; the CPU regions are the
/// spans between them (the CPU code that ran there, in graph order).
#[derive(Clone, Debug, PartialEq)]
pub struct RegionTime {
    /// The region's name, as `heron run --stats` reports it.
    pub name: String,
    /// `vta` or `cpu`.
    pub target: &'static str,
    /// Wall time of the region in milliseconds.
    pub time_ms: f64,
    /// Time inside the device's run (VTA regions).
    pub device_ms: f64,
    /// Simulated cycles (VTA regions, simulators only).
    pub cycles: Option<u64>,
}

/// The regions of one run that started at `start` and ended at `end`.
pub fn region_times(stats: &VtaStats, start: Instant, end: Instant) -> Vec<RegionTime> {
    let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
    let mut out = Vec::with_capacity(stats.calls.len() * 2 + 1);
    let mut at = start;
    let mut cpu = 0;
    let mut cpu_region = |out: &mut Vec<RegionTime>, from: Instant, to: Instant| {
        out.push(RegionTime {
            name: format!("cpu_{cpu}"),
            target: "cpu",
            time_ms: ms(from, to),
            device_ms: 0.0,
            cycles: None,
        });
        cpu += 1;
    };
    for c in &stats.calls {
        cpu_region(&mut out, at, c.start);
        out.push(RegionTime {
            name: c.name.to_string(),
            target: "vta",
            time_ms: ms(c.start, c.end),
            device_ms: c.device_time.as_secs_f64() * 1e3,
            cycles: c.cycles,
        });
        at = c.end;
    }
    cpu_region(&mut out, at, end);
    out
}

/// The `--stats` JSON: `{"regions": [{"name", "target", "time_ms", ...}], "vta": {the seven
/// counters}, "summary": {...}}`.
pub fn stats_json(regions: &[RegionTime], stats: &VtaStats) -> serde_json::Value {
    use serde_json::json;
    let p = stats.profile.unwrap_or_default();
    let sum = |f: &dyn Fn(&RegionTime) -> f64, target: &str| -> f64 {
        regions.iter().filter(|r| r.target == target).map(f).sum::<f64>() + 0.0
    };
    let vta_ms = sum(&|r| r.time_ms, "vta");
    let device_ms = sum(&|r| r.device_ms, "vta");
    let cycles: u64 = regions.iter().filter_map(|r| r.cycles).sum();
    json!({
        "regions": regions.iter().map(|r| {
            let mut o = json!({"name": r.name, "target": r.target, "time_ms": r.time_ms});
            if r.target == "vta" {
                o["device_ms"] = json!(r.device_ms);
                o["cycles"] = json!(r.cycles);
            }
            o
        }).collect::<Vec<_>>(),
        "vta": {
            "inp_load_nbytes": p.inp_load_nbytes,
            "wgt_load_nbytes": p.wgt_load_nbytes,
            "acc_load_nbytes": p.acc_load_nbytes,
            "uop_load_nbytes": p.uop_load_nbytes,
            "out_store_nbytes": p.out_store_nbytes,
            "gemm_counter": p.gemm_counter,
            "alu_counter": p.alu_counter,
        },
        "summary": {
            "cpu_ms": sum(&|r| r.time_ms, "cpu"),
            "vta_ms": vta_ms,
            "device_ms": device_ms,
            "executor_overhead_ms": vta_ms - device_ms,
            "simulated_cycles": cycles,
        },
    })
}
