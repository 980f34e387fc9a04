//! `clawmem-sim`: the simulator's command line.
//!
//! Subcommands so far: `presets` (the simulated parts). Trace replay, power
//! loss campaigns, image tools and the peer comparison arrive with the
//! simulator CLI issue.

use clap::{Parser, Subcommand};
use clawmem_sim::Preset;

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
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Presets { json } => {
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
    }
}
