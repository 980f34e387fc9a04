//! An SVG heat map of wear: the erase count of every sector, drawn as a grid
//! (sector `i` at column `i % cols`, row `i / cols`) coloured from pale
//! yellow (no erases) to dark red (the most-erased sector), with a scale.

use std::path::Path;

use plotters::prelude::*;

/// Columns of the grid for `sectors` sectors: 32, or fewer for small flashes.
pub fn columns(sectors: usize) -> usize {
    sectors.clamp(1, 32)
}

/// Colour of `count` on a scale from 0 to `max` (yellow, orange, dark red).
pub fn color(count: u64, max: u64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 3] = [
        (255.0, 255.0, 204.0),
        (253.0, 141.0, 60.0),
        (128.0, 0.0, 38.0),
    ];
    let t = if max == 0 {
        0.0
    } else {
        count as f64 / max as f64
    };
    let (a, b, u) = if t <= 0.5 {
        (STOPS[0], STOPS[1], t * 2.0)
    } else {
        (STOPS[1], STOPS[2], (t - 0.5) * 2.0)
    };
    let mix = |x: f64, y: f64| (x + (y - x) * u).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Writes the heat map of `erase_counts` (one per sector) to `path` as SVG,
/// with `title` above it.
pub fn write_erase_heatmap(path: &Path, erase_counts: &[u64], title: &str) -> Result<(), String> {
    draw(path, erase_counts, title).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw(path: &Path, counts: &[u64], title: &str) -> Result<(), Box<dyn std::error::Error>> {
    let n = counts.len().max(1);
    let cols = columns(n);
    let rows = n.div_ceil(cols);
    let max = counts.iter().copied().max().unwrap_or(0);
    let mean = counts.iter().sum::<u64>() as f64 / n as f64;
    let cell = (720 / cols).clamp(8, 60) as u32;
    let grid_w = cell * cols as u32;
    let width = grid_w + 80 + 110;
    let height = (cell * rows as u32 + 110).max(260);

    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (main, legend) = root.split_horizontally(width - 110);
    let mut chart = ChartBuilder::on(&main)
        .caption(
            format!("{title}: erases per sector (max {max}, mean {mean:.2})"),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..cols as f64, rows as f64..0f64)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("sector % columns")
        .y_desc("first sector of the row")
        .x_labels(cols.min(16))
        .y_labels(rows.min(16))
        .x_label_formatter(&|x| format!("{}", x.floor() as i64))
        .y_label_formatter(&|y| format!("{}", (y.floor() as i64) * cols as i64))
        .draw()?;
    chart.draw_series(counts.iter().enumerate().map(|(i, c)| {
        let (x, y) = ((i % cols) as f64, (i / cols) as f64);
        Rectangle::new([(x, y), (x + 1.0, y + 1.0)], color(*c, max).filled())
    }))?;

    // The scale: max at the top, 0 at the bottom.
    let (top, steps, step_h) = (40i32, 40i32, 4i32);
    for s in 0..steps {
        let v = max as f64 * f64::from(steps - 1 - s) / f64::from(steps - 1);
        let y = top + s * step_h;
        legend.draw(&Rectangle::new(
            [(10, y), (30, y + step_h)],
            color(v.round() as u64, max).filled(),
        ))?;
    }
    let label = ("sans-serif", 13).into_font();
    legend.draw(&Text::new(format!("{max}"), (36, top), label.clone()))?;
    legend.draw(&Text::new(
        "0".to_string(),
        (36, top + steps * step_h - 12),
        label.clone(),
    ))?;
    legend.draw(&Text::new(
        "erases".to_string(),
        (10, top + steps * step_h + 8),
        label,
    ))?;
    root.present()?;
    Ok(())
}
