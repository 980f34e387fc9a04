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
        /// Flash part: esp32, nrf52, stm32l4, stm32h7, esp32-encrypted or generic.
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
        /// Between requests, let each engine do its idle work
        /// (`maintain`): after every history read and every append that
        /// ends with an assistant record or completes a turn. Its device
        /// time is reported apart, in no operation's latency.
        #[arg(long)]
        idle: bool,
        #[command(flatten)]
        fill: FillArgs,
        /// With --fill: write an SVG of program WA against fullness here.
        #[arg(long, requires = "fill")]
        plot: Option<PathBuf>,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a trace through clawmem and its peers (ESP-Claw's files on FAT
    /// over ESP-IDF-style wear levelling, on littlefs when built with the
    /// `littlefs` feature, and the same data on sequential-storage's queues
    /// and map) on the same simulated flash and compare
    /// erases, write amplification and wear.
    Compare {
        /// The trace file (JSON Lines).
        trace: PathBuf,
        /// Flash part: esp32, nrf52, stm32l4, stm32h7, esp32-encrypted or generic.
        #[arg(long, default_value = "esp32")]
        preset: Preset,
        /// Partition size in bytes (suffixes K, KiB, M, MiB allowed);
        /// default: the preset's, 1 MiB.
        #[arg(long, value_parser = parse_size)]
        size: Option<usize>,
        /// Rounds to replay (as `replay --repeat`).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Write an SVG of the erase count per sector per engine here (with
        /// --fill: of program WA against fullness).
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Between requests, let each engine do its idle work
        /// (`maintain`): after every history read and every append that
        /// ends with an assistant record or completes a turn. Its device
        /// time is reported apart, in no operation's latency.
        #[arg(long)]
        idle: bool,
        #[command(flatten)]
        fill: FillArgs,
        /// Print `{"engines": [report, ...]}` instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Power-loss campaign: replay a trace with a power cut at chosen
    /// program/erase calls, mount afresh after each and check durability,
    /// atomicity, `check()` and progress. Exits non-zero on any violation.
    Torture {
        /// The trace file (JSON Lines).
        trace: PathBuf,
        /// Flash part: esp32, nrf52, stm32l4, stm32h7, esp32-encrypted or generic.
        #[arg(long, default_value = "esp32")]
        preset: Preset,
        /// Partition size in bytes (suffixes K, KiB, M, MiB allowed).
        #[arg(long, value_parser = parse_size)]
        size: Option<usize>,
        /// Sample this many cut points with the seed (default 100).
        #[arg(long, conflicts_with_all = ["all", "cut"])]
        cuts: Option<u64>,
        /// Take every program and erase call as a cut point.
        #[arg(long)]
        all: bool,
        /// Take exactly this cut point (to replay a violation).
        #[arg(long)]
        cut: Option<u64>,
        /// Tear pattern: prefix, bits, random, all (the three), or words (a
        /// prefix at every word of each program call plus 8 bit patterns).
        #[arg(long, default_value = "all", value_parser = ["prefix", "bits", "random", "all", "words"])]
        tear: String,
        /// After each cut, also cut at every program and erase call of the
        /// recovery (mount, repair, next write and the GC it owes).
        #[arg(long)]
        double: bool,
        /// I/N: take every N-th chosen cut point starting at the I-th.
        #[arg(long, value_parser = parse_shard)]
        shard: Option<(u64, u64)>,
        /// Seed of the sampling and the tears.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Replay only the first N operations of the trace (with --fill,
        /// of the fill workload's op list).
        #[arg(long)]
        ops: Option<usize>,
        /// Call clawmem's idle-time maintenance (`maintain`) where
        /// `replay --idle` does, in the clean run and every cut run, so that
        /// cuts fall inside it too.
        #[arg(long)]
        idle: bool,
        /// Replay the fill workload's operations (rounds kept until the
        /// first Full, then deleting the oldest session on each refused
        /// append), computed once on a clean run; adds the capacity check:
        /// after a cut, the next writes the uncut store took must not
        /// answer Full.
        #[arg(long)]
        fill: bool,
        /// clawmem's session table: 128 (default), 512, 1024, 2048 or 4096
        /// (for --fill on a partition that keeps more sessions live before
        /// it fills).
        #[arg(long)]
        sessions: Option<usize>,
        /// Start every run from this flash image (of --preset; its size is
        /// the partition's) instead of a blank partition, with the model
        /// holding what it holds: on a golden image of an older format
        /// (tests/images/v*/), this cuts power inside its in-place upgrade.
        #[arg(long, conflicts_with_all = ["fill", "size"])]
        image: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Convert a trace into the binary op stream that the QEMU firmware
    /// (examples/qemu, scripts/qemu-replay.sh) executes.
    Opstream {
        /// The trace file (JSON Lines).
        trace: PathBuf,
        /// The op stream file to write.
        out: PathBuf,
        #[command(flatten)]
        stream: StreamArgs,
    },
    /// Check the results file the QEMU firmware wrote for an op stream made
    /// with the same options, the way `replay` checks (histories against
    /// the model, with the firmware's compaction and blocked decisions).
    /// Prints one JSON line; exits non-zero on a mismatch, an error, a
    /// stack overflow or a stack over --stack-budget.
    Opcheck {
        /// The trace file (JSON Lines).
        trace: PathBuf,
        /// The results file the firmware wrote.
        results: PathBuf,
        #[command(flatten)]
        stream: StreamArgs,
        /// Fail when the peak engine stack exceeds this many bytes.
        #[arg(long)]
        stack_budget: Option<u64>,
        /// Corrupt the expected digest of the first history: the check must
        /// then fail (proves that it can).
        #[arg(long)]
        selftest_mismatch: bool,
        /// Fail unless every sector was erased during the replay (the
        /// run went all the way round the flash ring).
        #[arg(long)]
        require_wrap: bool,
        /// QEMU's exit status (non-zero is an error), for the report.
        #[arg(long, allow_hyphen_values = true)]
        qemu_status: Option<i32>,
        /// QEMU's wall time in seconds, for the report.
        #[arg(long)]
        qemu_seconds: Option<f64>,
    },
    /// Dump a flash image (raw partition bytes): per-sector headers,
    /// sessions, memory items, profiles, `check()`. Damage is reported, not
    /// fatal; an image that does not mount is still dumped per sector.
    Inspect {
        /// The image file.
        image: PathBuf,
        /// Flash part whose geometry the image has.
        #[arg(long, default_value = "esp32")]
        preset: Preset,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write what a clawmem image holds into DIR in ESP-Claw's file layout:
    /// sessions/s_<safe>_<hash>.log + .log.idx (CHDX) + .log.blocked,
    /// memory/memory_records.jsonl, memory_index.json, memory_digest.log,
    /// MEMORY.md, soul.md, identity.md, user.md, and the session manager's
    /// sessions/chat_map/ and sessions/subagent_map/ (the latter from the
    /// sidecar IMAGE.session-maps.json that import wrote). The image is
    /// not changed.
    Export {
        /// The image file.
        image: PathBuf,
        /// Directory to write (created if need be).
        dir: PathBuf,
        /// Flash part whose geometry the image has.
        #[arg(long, default_value = "esp32")]
        preset: Preset,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Build a fresh clawmem image from an ESP-Claw data directory (the
    /// layout `export` writes). A session index that does not match its
    /// log is rebuilt from the log, where ESP-Claw would wipe the session.
    Import {
        /// The ESP-Claw data directory.
        dir: PathBuf,
        /// Image file to write (only if the import succeeds).
        image: PathBuf,
        /// Flash part.
        #[arg(long, default_value = "esp32")]
        preset: Preset,
        /// Partition size (default: the preset's, 1 MiB on esp32).
        #[arg(long, value_parser = parse_size)]
        size: Option<usize>,
        /// File of session ids, one per line, to name the session files
        /// whose id cannot be read back from the file name (besides the
        /// ids of ESP-Claw's chat and subagent maps; a file whose id is
        /// still unknown is imported as `unrecovered:<file stem>`).
        #[arg(long)]
        ids: Option<PathBuf>,
        /// Leave out records-log lines that do not parse (a torn line),
        /// with a warning, instead of failing.
        #[arg(long)]
        skip_bad_lines: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The options an op stream is made with (`opstream` and `opcheck` must
/// get the same).
#[derive(clap::Args)]
struct StreamArgs {
    /// Replay only the first N operations of the trace.
    #[arg(long)]
    ops: Option<usize>,
    /// Partition size in bytes (suffixes K, KiB, M, MiB allowed).
    #[arg(long, value_parser = parse_size, default_value = "1MiB")]
    size: usize,
    /// Flash part; the firmware models esp32 only.
    #[arg(long, default_value = "esp32")]
    preset: Preset,
    /// Rounds to replay (as `replay --repeat`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// End the stream with the API tour: the firmware calls every other
    /// public `Store` operation on the store the trace left, each measured
    /// and reported under its own name (opcheck then makes no host
    /// comparison of the flash work).
    #[arg(long)]
    tour: bool,
}

impl StreamArgs {
    fn options(&self) -> clawmem_sim::opstream::StreamOptions {
        clawmem_sim::opstream::StreamOptions {
            ops: self.ops,
            repeat: self.repeat,
            size_bytes: self.size,
            preset: self.preset,
            tour: self.tour,
        }
    }
}

fn opstream(trace: PathBuf, out: PathBuf, args: StreamArgs) -> Result<(), String> {
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let enc =
        clawmem_sim::opstream::encode_stream(&trace, &args.options()).map_err(|e| e.to_string())?;
    std::fs::write(&out, &enc.bytes).map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!(
        "opstream: {} trace ops ({} stream ops, {} B) to {}; partition {} B, session limit {} B",
        enc.trace_ops,
        enc.op_count,
        enc.bytes.len(),
        out.display(),
        args.size,
        enc.session_size_limit_bytes
    );
    Ok(())
}

fn opcheck(
    trace: PathBuf,
    results: PathBuf,
    args: StreamArgs,
    copts: clawmem_sim::opstream::CheckOptions,
) -> Result<bool, String> {
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(&results).map_err(|e| format!("{}: {e}", results.display()))?;
    let report = clawmem_sim::opstream::check(&trace, &args.options(), &bytes, &copts)
        .map_err(|e| e.to_string())?;
    // The reason first, on stderr: the JSON stays the last line.
    if !report.ok {
        eprintln!(
            "clawmem-sim: opcheck failed: {} history mismatches, {} profile mismatches, {} errors{}{}",
            report.history_mismatches,
            report.profile_mismatches,
            report.errors,
            if report.stack_overflow { ", stack overflow" } else { "" },
            if report.over_stack_budget { ", over the stack budget" } else { "" }
        );
        if report.require_wrap && !report.ring_wrapped {
            eprintln!(
                "clawmem-sim: the ring did not wrap: {} of {} sectors erased after the format",
                report.sectors_erased_in_replay, report.geometry.sector_count
            );
        }
        for m in [&report.first_mismatch, &report.first_error]
            .into_iter()
            .flatten()
        {
            eprintln!("clawmem-sim: {m}");
        }
    }
    println!(
        "{}",
        serde_json::to_string(&report).expect("report serializes")
    );
    Ok(report.ok)
}

/// `I/N` with I < N.
fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not I/N"))?;
    let (i, n): (u64, u64) = (
        i.trim().parse().map_err(|_| format!("{s:?} is not I/N"))?,
        n.trim().parse().map_err(|_| format!("{s:?} is not I/N"))?,
    );
    if n == 0 || i >= n {
        return Err(format!("{s:?}: need 0 <= I < N"));
    }
    Ok((i, n))
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
        "{:<15} {:>6} {:>8} {:>8}  {:<18} {:>10} {:>10} {:>9}",
        "preset", "word", "sector", "size", "write rule", "program", "erase", "cycles"
    );
    for m in models {
        let g = m.geometry;
        let t = m.timings;
        println!(
            "{:<15} {:>5}B {:>7}B {:>7}K  {:<18} {:>4}B/{:>3}us {:>8}us {:>9}",
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

fn compare(
    trace: PathBuf,
    opts: ReplayOptions,
    plot: Option<PathBuf>,
    json: bool,
) -> Result<(), String> {
    use clawmem_sim::compare::{compare, write_plot, Engine};
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let total = trace.ops.len() as u64 * u64::from(opts.run.repeat);
    let hidden = json || !std::io::stderr().is_terminal();
    let mut bars: Vec<(String, ProgressBar)> = Vec::new();
    let cmp = compare(&trace, &opts, &Engine::ALL, &mut |engine, done, _| {
        if bars.last().is_none_or(|(e, _)| *e != engine) {
            if let Some((_, b)) = bars.last() {
                b.finish_and_clear();
            }
            let bar = progress_bar(total, hidden);
            bar.set_prefix(engine.to_string());
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:>12} [{bar:40}] {pos}/{len} ops  {elapsed_precise}  eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bars.push((engine.to_string(), bar));
        }
        if let Some((_, b)) = bars.last() {
            b.set_position(done);
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some((_, b)) = bars.last() {
        b.finish_and_clear();
    }
    if let Some(path) = &plot {
        let r = cmp.engines.first();
        let title = format!(
            "{}, {}",
            r.map_or("", |r| r.preset.as_str()),
            r.map_or("", |r| r.trace.as_str())
        );
        write_plot(path, &cmp, &title)?;
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&cmp).expect("comparison serializes")
        );
    } else {
        print!("{cmp}");
        if let Some(path) = &plot {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}

fn torture(
    trace: PathBuf,
    opts: clawmem_sim::torture::TortureOptions,
    json: bool,
) -> Result<(), String> {
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let bar = progress_bar(0, json || !std::io::stderr().is_terminal());
    bar.set_style(
        ProgressStyle::with_template(
            "torture [{bar:40}] {pos}/{len} runs  {elapsed_precise}  eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let report = clawmem_sim::torture::torture(&trace, &opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        print!("{report}");
    }
    if report.violations > 0 {
        return Err(format!(
            "{} violation(s); replay the first with {}",
            report.violations,
            report.first_violation.as_deref().unwrap_or("?")
        ));
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
            idle,
            fill,
            plot,
            json,
        } => {
            let opts = ReplayOptions {
                preset,
                size_bytes: size,
                image,
                run: RunOptions {
                    repeat,
                    turns_per_day,
                    idle,
                },
            };
            if fill.fill {
                fill_replay(trace, opts, fill, heatmap, plot, json)
            } else {
                replay(trace, opts, heatmap, json)
            }
        }
        Command::Compare {
            trace,
            preset,
            size,
            repeat,
            plot,
            idle,
            fill,
            json,
        } => {
            let opts = ReplayOptions {
                preset,
                size_bytes: size,
                image: None,
                run: RunOptions {
                    repeat,
                    idle,
                    ..RunOptions::default()
                },
            };
            if fill.fill {
                fill_compare(trace, opts, fill, plot, json)
            } else {
                compare(trace, opts, plot, json)
            }
        }
        Command::Torture {
            trace,
            preset,
            size,
            cuts,
            all,
            cut,
            tear,
            double,
            shard,
            seed,
            ops,
            idle,
            fill,
            sessions,
            image,
            json,
        } => {
            use clawmem_sim::torture::{Cuts, TortureOptions};
            let opts = TortureOptions {
                preset,
                size_bytes: size,
                cuts: match (all, cut) {
                    (true, _) => Cuts::All,
                    (_, Some(k)) => Cuts::Only(k),
                    _ => Cuts::Sample(cuts.unwrap_or(100)),
                },
                tears: clawmem_sim::torture::TearKind::parse_list(&tear)
                    .expect("clap checked the tear name"),
                double,
                shard,
                seed,
                ops,
                idle,
                fill,
                sessions,
                image,
                sabotage: false,
            };
            torture(trace, opts, json)
        }
        Command::Opstream { trace, out, stream } => opstream(trace, out, stream),
        Command::Opcheck {
            trace,
            results,
            stream,
            stack_budget,
            selftest_mismatch,
            require_wrap,
            qemu_status,
            qemu_seconds,
        } => match opcheck(
            trace,
            results,
            stream,
            clawmem_sim::opstream::CheckOptions {
                stack_budget,
                selftest_mismatch,
                compare_host: true,
                require_wrap,
                qemu_status,
                qemu_seconds,
            },
        ) {
            // Failed checks have said why, before the JSON line.
            Ok(false) => return ExitCode::FAILURE,
            other => other.map(|_| ()),
        },
        Command::Inspect {
            image,
            preset,
            json,
        } => clawmem_sim::inspect::inspect_file(&image, preset)
            .map(|report| {
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&report).expect("report serializes")
                    );
                } else {
                    print!("{report}");
                }
            })
            .map_err(|e| e.to_string()),
        Command::Export {
            image,
            dir,
            preset,
            json,
        } => clawmem_sim::espfiles::export_image(&image, preset, &dir)
            .map(|r| {
                if json {
                    println!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
                } else {
                    println!(
                        "exported {} to {}: {} sessions ({} records, {} blocked), {} memory items, {} labels, {} profiles, {} files",
                        image.display(),
                        dir.display(),
                        r.sessions,
                        r.records,
                        r.blocked,
                        r.memory_items,
                        r.labels,
                        r.profiles,
                        r.files.len()
                    );
                    if r.damaged_records > 0 {
                        println!("{} damaged records were left out", r.damaged_records);
                    }
                    if r.chat_maps + r.subagent_maps > 0 {
                        println!("{} chat maps, {} subagent maps", r.chat_maps, r.subagent_maps);
                    }
                    for c in &r.labels_cut {
                        println!("label cut to ESP-Claw's 8 characters: {c}");
                    }
                    for w in &r.warnings {
                        println!("warning: {w}");
                    }
                }
            })
            .map_err(|e| e.to_string()),
        Command::Import {
            dir,
            image,
            preset,
            size,
            ids,
            skip_bad_lines,
            json,
        } => (|| {
            let ids = match ids {
                Some(path) => clawmem_sim::espfiles::read_ids(&path)?,
                None => Vec::new(),
            };
            let opts = clawmem_sim::espfiles::ImportOptions {
                ids,
                skip_bad_lines,
            };
            clawmem_sim::espfiles::import_to_image(&dir, &image, preset, size, &opts)
        })()
        .map(|r| {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
            } else {
                println!(
                    "imported {} into {}: {} sessions ({} records, {} indexes rebuilt, {} compacted, {} were blocked), {} memory items ({} stored, {} merged), {} profiles",
                    dir.display(),
                    image.display(),
                    r.sessions,
                    r.records,
                    r.indexes_rebuilt,
                    r.compacted,
                    r.blocked_markers,
                    r.memory_items,
                    r.memory_stored,
                    r.memory_merged,
                    r.profiles
                );
                if r.chat_maps + r.subagent_maps > 0 {
                    println!(
                        "{} chat maps ({} stored in the image), {} subagent maps",
                        r.chat_maps, r.chat_maps_stored, r.subagent_maps
                    );
                }
                if let Some(side) = &r.sidecar {
                    println!("sidecar (export reads it beside the image): {side}");
                }
                for f in &r.fallback_ids {
                    println!("fallback id: {f}");
                }
                for w in &r.warnings {
                    println!("warning: {w}");
                }
            }
        })
        .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clawmem-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---- the fill workload (clawmem_sim::fill) ----------------------------------

/// `--fill` and its options, shared by `replay` and `compare`.
#[derive(clap::Args)]
struct FillArgs {
    /// The fill workload: keep every round until the engine first answers
    /// Full, then as many operations again, deleting the oldest session
    /// whenever an append is refused (docs/TESTING.md).
    #[arg(long, conflicts_with = "repeat")]
    fill: bool,
    /// With --fill: clawmem's session table (512, 1024, 2048 or 4096).
    #[arg(long, requires = "fill", default_value_t = clawmem_sim::fill::FILL_SESSIONS,
          value_parser = parse_session_table)]
    sessions: usize,
    /// With --fill: stop after this many rounds if the store has not
    /// filled (every round's sessions kept: a workload of N times the
    /// trace's sessions, for large partitions).
    #[arg(long, requires = "fill", value_parser = clap::value_parser!(u32).range(1..))]
    rounds: Option<u32>,
}

fn parse_session_table(s: &str) -> Result<usize, String> {
    use clawmem_sim::fill::SESSION_TABLES;
    match s.trim().parse::<usize>() {
        Ok(n) if SESSION_TABLES.contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?}: the session table is one of {SESSION_TABLES:?}"
        )),
    }
}

/// A progress bar for a run whose length is only estimated.
fn fill_bar(hidden: bool, prefix: &str) -> ProgressBar {
    let bar = progress_bar(0, hidden);
    bar.set_prefix(prefix.to_string());
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} fill {pos} ops  {elapsed_precise}")
            .expect("valid template"),
    );
    bar
}

fn fill_replay(
    trace: PathBuf,
    opts: ReplayOptions,
    args: FillArgs,
    heatmap: Option<PathBuf>,
    plot: Option<PathBuf>,
    json: bool,
) -> Result<(), String> {
    use clawmem_sim::fill::{fill_clawmem, write_fill_plot, FillOptions};
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let bar = fill_bar(json || !std::io::stdout().is_terminal(), "clawmem");
    let fopts = FillOptions {
        sessions: args.sessions,
        max_rounds: args.rounds,
    };
    let run = fill_clawmem(&trace, &opts, &fopts, &mut |done, _| bar.set_position(done))
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let title = format!("clawmem, {}, {}", run.report.preset, run.report.trace);
    if let Some(path) = &heatmap {
        write_erase_heatmap(path, &run.report.erase_counts, &title)?;
    }
    if let Some(path) = &plot {
        write_fill_plot(path, &[&run], &title)?;
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&run).expect("report serializes")
        );
    } else {
        print!("{run}");
        for (what, path) in [
            ("image", &opts.image),
            ("heat map", &heatmap),
            ("plot", &plot),
        ] {
            if let Some(path) = path {
                println!("{what}: {}", path.display());
            }
        }
    }
    Ok(())
}

fn fill_compare(
    trace: PathBuf,
    opts: ReplayOptions,
    args: FillArgs,
    plot: Option<PathBuf>,
    json: bool,
) -> Result<(), String> {
    use clawmem_sim::compare::Engine;
    use clawmem_sim::fill::{compare_fill, write_fill_plot, FillOptions};
    let trace = Trace::from_path(&trace).map_err(|e| e.to_string())?;
    let hidden = json || !std::io::stderr().is_terminal();
    let fopts = FillOptions {
        sessions: args.sessions,
        max_rounds: args.rounds,
    };
    let mut bar: Option<(String, ProgressBar)> = None;
    let cmp = compare_fill(
        &trace,
        &opts,
        &fopts,
        &Engine::ALL,
        &mut |engine, done, _| {
            if bar.as_ref().is_none_or(|(e, _)| e != engine) {
                if let Some((_, b)) = &bar {
                    b.finish_and_clear();
                }
                bar = Some((engine.to_string(), fill_bar(hidden, engine)));
            }
            if let Some((_, b)) = &bar {
                b.set_position(done);
            }
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some((_, b)) = &bar {
        b.finish_and_clear();
    }
    if let Some(path) = &plot {
        let r = cmp.engines.first().map(|r| &r.report);
        let title = format!(
            "{}, {} KiB, {}",
            r.map_or("", |r| r.preset.as_str()),
            r.map_or(0, |r| r.capacity_bytes / 1024),
            r.map_or("", |r| r.trace.as_str())
        );
        let runs: Vec<_> = cmp.engines.iter().collect();
        write_fill_plot(path, &runs, &title)?;
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&cmp).expect("comparison serializes")
        );
    } else {
        print!("{cmp}");
        if let Some(path) = &plot {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}
