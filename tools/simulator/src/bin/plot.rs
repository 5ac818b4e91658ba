//! Draws rows/s over time for every simulated case (the CSV files `simulator --csv DIR` wrote)
//! on the Consumption plan, tablescan against the published design where both ran, one panel
//! per case, into a PNG.
//!
//!     plot DIR OUT.png [FONT.ttf]
//!
//! Text is drawn with the TrueType font given (default: Debian's DejaVu Sans).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::register_font;

/// The cases the simulator wrote tablescan CSV files for on the Consumption plan, by name.
fn cases(dir: &Path) -> Vec<String> {
    let mut cases: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(TABLESCAN)
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    cases.sort();
    cases
}

fn read(path: &Path) -> Vec<(f64, f64)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split(',');
            Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
        })
        .collect()
}

const TABLESCAN: &str = "-tablescan-consumption.csv";
const PUBLISHED: &str = "-published-consumption.csv";

/// Plots the simulated consumption runs of `simulator --csv DIR` beside the published ones.
#[derive(clap::Parser)]
#[command(name = "plot")]
struct Args {
    /// The folder `simulator --csv` wrote
    dir: String,
    /// The PNG to write
    out: String,
    /// A TrueType font for the labels
    #[arg(default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")]
    font: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args { dir, out, font } = clap::Parser::parse();
    let (dir, out, font) = (dir.as_str(), out.as_str(), font.as_str());
    let bytes: &'static [u8] = Box::leak(
        std::fs::read(font)
            .map_err(|e| format!("font {font}: {e}"))?
            .into_boxed_slice(),
    );
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| "the font could not be read")?;

    let cases = cases(Path::new(dir));
    if cases.is_empty() {
        return Err(format!(
            "no <case>{TABLESCAN} files in {dir}; run `simulator --csv {dir}` first"
        )
        .into());
    }
    let rows = cases.len().div_ceil(2);
    let root = BitMapBackend::new(out, (1600, 450 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Simulated rows read per second, Consumption plan: tablescan (blue), published design (red)",
        ("sans-serif", 28),
    )?;
    for (panel, case) in root.split_evenly((rows, 2)).iter().zip(&cases) {
        let ours = read(&Path::new(dir).join(format!("{case}{TABLESCAN}")));
        let theirs = read(&Path::new(dir).join(format!("{case}{PUBLISHED}")));
        let span = ours
            .iter()
            .chain(&theirs)
            .map(|p| p.0 + 5.0)
            .fold(30.0, f64::max);
        let top = ours.iter().chain(&theirs).map(|p| p.1).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(panel)
            .caption(case, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..span, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("rows/s")
            .label_style(("sans-serif", 14))
            .draw()?;
        chart.draw_series(LineSeries::new(ours.iter().copied(), BLUE.stroke_width(2)))?;
        chart.draw_series(LineSeries::new(theirs.iter().copied(), RED.stroke_width(2)))?;
    }
    root.present()?;
    println!("wrote {out}");
    Ok(())
}
