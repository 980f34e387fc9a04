//! `clawmem-sim`: the simulator's command line.
//!
//! Subcommands so far: `presets` (the simulated parts) and `replay` (run an
//! agent trace through clawmem on a simulated flash and report). Power-loss
//! campaigns, image tools and the peer comparison arrive with the simulator
//! CLI issue.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use clawmem_sim::heatmap::write_erase_heatmap;
use clawmem_sim::{replay_clawmem, Preset, ReplayOptions, RunOptions, Trace};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "clawmem-sim",
    version,
    about = "NOR-flash simulator for clawmem"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the flash presets: geometry, write rule, timings, endurance.
    Presets {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Replay an agent trace (traces/FORMAT.md) through clawmem on a
    /// simulated flash: check every history, count wear and report.
    ///
    /// Round 0 replays the trace as it is; with --repeat N, round k >= 1
    /// suffixes session ids with `#k` and deletes each session of round k-1
    /// before it first touches the same id, so a long run reaches a steady
    /// state of one round's data.
    Replay {
        /// The trace file (JSON Lines).
        trace: PathBuf,
        /// Flash part: esp32, nrf52, stm32l4, stm32h7 or generic.
        #[arg(long, default_value = "esp32")]
        preset: Preset,
        /// Partition size in bytes (suffixes K, KiB, M, MiB allowed);
        /// default: the preset's, 1 MiB.
        #[arg(long, value_parser = parse_size)]
        size: Option<usize>,
        /// Keep the flash in this file (created or truncated) instead of RAM.
        #[arg(long)]
        image: Option<PathBuf>,
        /// Rounds to replay.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Completed turns a day, for the lifetime estimate.
        #[arg(long, default_value_t = 200.0, value_parser = parse_turns_per_day)]
        turns_per_day: f64,
        /// Write an SVG heat map of the erase count per sector here.
        #[arg(long)]
        heatmap: Option<PathBuf>,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Bytes, with an optional binary suffix: `1048576`, `1M`, `1MiB`, `512K`.
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size in bytes"))?;
    let unit = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1024,
        "m" | "mib" => 1024 * 1024,
        _ => return Err(format!("{s:?}: unknown size suffix (use K, KiB, M or MiB)")),
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn parse_turns_per_day(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of turns")),
    }
}

fn presets(json: bool) {
    let models: Vec<_> = Preset::ALL.iter().map(|p| p.default_model()).collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&models).expect("models serialize")
        );
        return;
    }
    println!(
        "{:<8} {:>6} {:>8} {:>8}  {:<18} {:>10} {:>10} {:>9}",
        "preset", "word", "sector", "size", "write rule", "program", "erase", "cycles"
    );
    for m in models {
        let g = m.geometry;
        let t = m.timings;
        println!(
            "{:<8} {:>5}B {:>7}B {:>7}K  {:<18} {:>4}B/{:>3}us {:>8}us {:>9}",
            m.name,
            g.write_size,
            g.erase_size,
            g.capacity() / 1024,
            format!("{:?}", m.write_rule),
            t.program_unit_bytes,
            t.program_unit_us,
            t.erase_sector_us,
            t.endurance_cycles
        );
    }
}

/// A progress bar on stderr, hidden when stdout is not a terminal or the
/// output is JSON. indicatif draws at most a few times a second, so ticking
/// it on every operation costs nothing; a replay shorter than that never
/// shows it.
fn progress_bar(total: u64, hidden: bool) -> ProgressBar {
    let target = if hidden {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(
        ProgressStyle::with_template(
            "replay [{bar:40}] {pos}/{len} ops  {elapsed_precise}  eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn replay(
    trace: PathBuf,
    opts: ReplayOptions,
    heatmap: Option<PathBuf>,
    json: bool,
) -> Result<(), String> {
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let total = trace.ops.len() as u64 * u64::from(opts.run.repeat);
    let bar = progress_bar(total, json || !std::io::stdout().is_terminal());
    let report = replay_clawmem(&trace, &opts, &mut |done, _| bar.set_position(done))
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    if let Some(path) = &heatmap {
        let title = format!("clawmem, {}, {}", report.preset, report.trace);
        write_erase_heatmap(path, &report.erase_counts, &title)?;
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        print!("{report}");
        if let Some(path) = &opts.image {
            println!("image: {}", path.display());
        }
        if let Some(path) = &heatmap {
            println!("heat map: {}", path.display());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Presets { json } => {
            presets(json);
            Ok(())
        }
        Command::Replay {
            trace,
            preset,
            size,
            image,
            repeat,
            turns_per_day,
            heatmap,
            json,
        } => {
            let opts = ReplayOptions {
                preset,
                size_bytes: size,
                image,
                run: RunOptions {
                    repeat,
                    turns_per_day,
                },
            };
            replay(trace, opts, heatmap, json)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clawmem-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
