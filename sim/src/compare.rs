//! `compare`: the same trace, on the same simulated flash model, through
//! clawmem and each peer ([`crate::peers`]); a table, a JSON object and an
//! SVG of the erase count of every sector per engine.
//!
//! The peers: ESP-Claw's own file pattern on FAT over ESP-IDF-style wear
//! levelling and on littlefs (feature `littlefs`), and ESP-Claw's data on
//! `sequential-storage` (a queue per session, its map for memory items and
//! profiles; [`peers::seqstore`]).

use std::fmt;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::flash::SimFlash;
use crate::latency::{self, LatencyReport};
use crate::peers;
use crate::replay::{replay, replay_clawmem, ReplayError, ReplayOptions, Report, RunOptions};
use crate::trace::Trace;

/// The engines `compare` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// clawmem itself.
    Clawmem,
    /// ESP-Claw's files on FAT over ESP-IDF-style wear levelling.
    EspClawFat,
    /// ESP-Claw's files on littlefs 2 (only with the `littlefs` feature;
    /// otherwise reported as skipped).
    EspClawLittlefs,
    /// ESP-Claw's sessions, memory and profiles on `sequential-storage`'s
    /// queues and map (skipped on flash that forbids rewriting a word).
    SequentialStorage,
}

impl Engine {
    /// Every engine, clawmem first.
    pub const ALL: [Engine; 4] = [
        Engine::Clawmem,
        Engine::EspClawFat,
        Engine::EspClawLittlefs,
        Engine::SequentialStorage,
    ];

    /// The engine's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Clawmem => "clawmem",
            Engine::EspClawFat => "esp-claw-fat",
            Engine::EspClawLittlefs => "esp-claw-littlefs",
            Engine::SequentialStorage => peers::seqstore::ENGINE,
        }
    }
}

/// Engines left out of a comparison, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    /// Engine name.
    pub engine: String,
    /// Why it did not run.
    pub reason: String,
}

/// The outcome of `compare`: one [`Report`] per engine that ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Reports, clawmem first.
    pub engines: Vec<Report>,
    /// Engines that could not run on this flash (or in this build).
    pub skipped: Vec<Skipped>,
    /// Each engine's erases over clawmem's, in the order of `engines`
    /// (null without clawmem erases).
    pub erases_vs_clawmem: Vec<(String, Option<f64>)>,
}

impl Comparison {
    /// The report of the engine named `name`.
    pub fn get(&self, name: &str) -> Option<&Report> {
        self.engines.iter().find(|r| r.engine == name)
    }

    /// Each engine's erases over clawmem's (`None` without clawmem erases).
    pub fn erase_ratio(&self, r: &Report) -> Option<f64> {
        let base = self.get(Engine::Clawmem.name())?.erases;
        (base > 0).then(|| r.erases as f64 / base as f64)
    }
}

/// Runs `trace` through every engine of `engines` on a fresh flash of
/// `opts`' preset and size. `progress` is called with the engine's name,
/// operations done and the total.
pub fn compare(
    trace: &Trace,
    opts: &ReplayOptions,
    engines: &[Engine],
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Comparison, ReplayError> {
    let mut out = Comparison {
        engines: Vec::new(),
        skipped: Vec::new(),
        erases_vs_clawmem: Vec::new(),
    };
    let p = opts.preset;
    let model = p.model(opts.size_bytes.unwrap_or_else(|| p.default_capacity()))?;
    let run: &RunOptions = &opts.run;
    for &engine in engines {
        let name = engine.name();
        let mut tick = |done, total| progress(name, done, total);
        match engine {
            Engine::Clawmem => {
                let o = ReplayOptions {
                    image: None,
                    ..opts.clone()
                };
                out.engines.push(replay_clawmem(trace, &o, &mut tick)?);
            }
            Engine::EspClawFat => match peers::fat::driver(SimFlash::new(model.clone())) {
                Ok(mut d) => out.engines.push(replay(&mut d, trace, run, &mut tick)),
                Err(reason) => out.skipped.push(Skipped {
                    engine: name.into(),
                    reason,
                }),
            },
            #[cfg(feature = "littlefs")]
            Engine::EspClawLittlefs => {
                match peers::littlefs::driver(SimFlash::new(model.clone())) {
                    Ok(mut d) => out.engines.push(replay(&mut d, trace, run, &mut tick)),
                    Err(reason) => out.skipped.push(Skipped {
                        engine: name.into(),
                        reason,
                    }),
                }
            }
            #[cfg(not(feature = "littlefs"))]
            Engine::EspClawLittlefs => out.skipped.push(Skipped {
                engine: name.into(),
                reason: "built without the `littlefs` feature (littlefs2 needs libclang: \
                         apt-get install libclang-dev, then cargo build --features littlefs)"
                    .into(),
            }),
            Engine::SequentialStorage => {
                match peers::seqstore::replay_preset(
                    p,
                    SimFlash::new(model.clone()),
                    trace,
                    run,
                    &mut tick,
                ) {
                    Ok(report) => out.engines.push(report),
                    Err(reason) => out.skipped.push(Skipped {
                        engine: name.into(),
                        reason,
                    }),
                }
            }
        }
    }
    out.erases_vs_clawmem = out
        .engines
        .iter()
        .map(|r| (r.engine.clone(), out.erase_ratio(r)))
        .collect();
    Ok(out)
}

fn f2(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(r) = self.engines.first() {
            writeln!(
                f,
                "trace {}  preset {}  {} KiB  rounds {}  ops {}",
                r.trace,
                r.preset,
                r.capacity_bytes / 1024,
                r.rounds,
                r.ops
            )?;
        }
        writeln!(
            f,
            "{:<18} {:>9} {:>9} {:>8} {:>8} {:>7} {:>8} {:>12} {:>12} {:>12} {:>6} {:>6}",
            "engine",
            "erases",
            "vs claw",
            "prog WA",
            "erase WA",
            "max",
            "mean",
            "programmed",
            "erased",
            "read",
            "mism.",
            "errors"
        )?;
        for r in &self.engines {
            writeln!(
                f,
                "{:<18} {:>9} {:>8}x {:>8} {:>8} {:>7} {:>8.2} {:>12} {:>12} {:>12} {:>6} {:>6}",
                r.engine,
                r.erases,
                f2(self.erase_ratio(r)),
                f2(r.program_wa),
                f2(r.erase_wa),
                r.erase_count_max,
                r.erase_count_mean,
                r.programmed_bytes,
                r.erased_bytes,
                r.read_bytes,
                r.history_mismatches,
                r.errors
            )?;
        }
        for r in &self.engines {
            if r.engine == Engine::Clawmem.name() {
                continue;
            }
            if r.erases == 0 {
                writeln!(f, "{} erased nothing", r.engine)?;
            } else if let Some(x) = self.erase_ratio(r) {
                let (k, word) = if x >= 1.0 {
                    (x, "fewer")
                } else {
                    (1.0 / x, "more")
                };
                writeln!(f, "clawmem: {k:.1}x {word} erases than {}", r.engine)?;
            }
            if let Some(m) = &r.first_mismatch {
                writeln!(f, "{}: first mismatch: {m}", r.engine)?;
            }
            if let Some(e) = &r.first_error {
                writeln!(f, "{}: first error: {e}", r.engine)?;
            }
        }
        for s in &self.skipped {
            writeln!(f, "{}: skipped: {}", s.engine, s.reason)?;
        }
        let lat: Vec<(&str, &LatencyReport)> = self
            .engines
            .iter()
            .map(|r| (r.engine.as_str(), &r.latency))
            .collect();
        latency::write_comparison_table(f, &lat)
    }
}

/// Line colours per engine, shared by the plots of `compare` and `--fill`.
pub(crate) const PALETTE: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
];

/// Writes an SVG of the erase count of every sector, one line per engine,
/// on a logarithmic axis (counts + 1).
pub fn write_plot(path: &Path, cmp: &Comparison, title: &str) -> Result<(), String> {
    draw(path, cmp, title).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw(path: &Path, cmp: &Comparison, title: &str) -> Result<(), Box<dyn std::error::Error>> {
    let sectors = cmp
        .engines
        .iter()
        .map(|r| r.erase_counts.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let max = cmp
        .engines
        .iter()
        .flat_map(|r| r.erase_counts.iter().copied())
        .max()
        .unwrap_or(0);
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title}: erases per sector"), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(
            0f64..sectors as f64,
            (1f64..(max as f64 + 1.0) * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("sector")
        .y_desc("erases + 1 (log)")
        .draw()?;
    for (i, r) in cmp.engines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let label = format!(
            "{}: {} erases, max {}",
            r.engine, r.erases, r.erase_count_max
        );
        chart
            .draw_series(LineSeries::new(
                r.erase_counts
                    .iter()
                    .enumerate()
                    .map(|(s, c)| (s as f64 + 0.5, *c as f64 + 1.0)),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
