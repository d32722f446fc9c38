//! The PNG: partitions per minute against N for each mode, and the GPU busy fraction beside it.
//!
//! Drawn with `plotters`' bitmap backend; text through `ab_glyph` from a TrueType file read at
//! run time (no fontconfig, so the binary has no system library dependency for this).

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use super::analysis::FarmResults;
use super::{FarmError, FarmResult, io_err};

/// Where fonts usually are (Debian/Ubuntu `fonts-dejavu-core`, Fedora, Arch).
pub const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// The font to draw with: `given`, else the first of [`FONT_CANDIDATES`] that exists.
pub fn find_font(given: Option<&Path>) -> Option<PathBuf> {
    match given {
        Some(p) => Some(p.to_path_buf()),
        None => FONT_CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file()),
    }
}

fn plot_err(e: impl std::fmt::Display) -> FarmError {
    FarmError::Plot(e.to_string())
}

const MODES: &[(&str, RGBColor)] = &[
    ("gpud", RGBColor(0x1f, 0x77, 0xb4)),
    ("ideal", RGBColor(0x2c, 0xa0, 0x2c)),
    ("flock", RGBColor(0xff, 0x7f, 0x0e)),
    ("none", RGBColor(0xd6, 0x27, 0x28)),
    ("gpud2", RGBColor(0x94, 0x67, 0xbd)),
];

/// Draws `results`' mode × N matrix into `out` (PNG, 1200×500).
pub fn draw(results: &FarmResults, out: &Path, font: &Path) -> FarmResult<()> {
    if results.cells.is_empty() {
        return Err(FarmError::Plot("no mode × N cells to plot".into()));
    }
    let bytes = std::fs::read(font).map_err(io_err(font))?;
    // plotters keeps registered fonts for the process's life.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| FarmError::Plot(format!("{} is not a usable font", font.display())))?;

    let mut ns: Vec<usize> = results.cells.iter().map(|c| c.n).collect();
    ns.sort_unstable();
    ns.dedup();
    let x_of = |n: usize| ns.iter().position(|&m| m == n).unwrap_or(0) as f64;
    let x_max = (ns.len().max(2) - 1) as f64;
    let y_max = results
        .cells
        .iter()
        .map(|c| c.normal.per_minute)
        .fold(1.0f64, f64::max)
        * 1.15;

    let root = BitMapBackend::new(out, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let title = format!(
        "gpud farm: {} partitions ({}@2^{}), {}",
        if results.host.simulated {
            "simulated"
        } else {
            "GPU"
        },
        results.config.circuit,
        results.config.log_size,
        results
            .host
            .gpus
            .first()
            .map_or("no GPU".to_owned(), |g| g.0.clone())
    );
    let root = root.titled(&title, ("sans-serif", 22)).map_err(plot_err)?;
    let (left, right) = root.split_horizontally(640);
    let label_n = |x: &f64| {
        let i = x.round() as usize;
        if (x - x.round()).abs() < 1e-6 {
            ns.get(i).map_or(String::new(), |n| n.to_string())
        } else {
            String::new()
        }
    };

    let mut chart = ChartBuilder::on(&left)
        .caption("throughput", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.2..x_max + 0.2, 0.0..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("N provers")
        .y_desc("partition proofs / min")
        .x_labels(ns.len().max(2) * 4)
        .x_label_formatter(&label_n)
        .draw()
        .map_err(plot_err)?;
    for &(mode, color) in MODES {
        let mut pts: Vec<(f64, f64)> = results
            .cells
            .iter()
            .filter(|c| c.mode == mode)
            .map(|c| (x_of(c.n), c.normal.per_minute))
            .collect();
        if pts.is_empty() {
            continue;
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = color.stroke_width(3);
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(plot_err)?
            .label(mode)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;

    let mut busy = ChartBuilder::on(&right)
        .caption("GPU busy (GPU phases / wall)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.2..x_max + 0.2, 0.0..105.0)
        .map_err(plot_err)?;
    busy.configure_mesh()
        .x_desc("N provers")
        .y_desc("%")
        .x_labels(ns.len().max(2) * 4)
        .x_label_formatter(&label_n)
        .draw()
        .map_err(plot_err)?;
    for &(mode, color) in MODES {
        let mut pts: Vec<(f64, f64)> = results
            .cells
            .iter()
            .filter(|c| c.mode == mode)
            .map(|c| (x_of(c.n), 100.0 * c.gpu_busy))
            .collect();
        if pts.is_empty() {
            continue;
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        busy.draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
            .map_err(plot_err)?;
        busy.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}
