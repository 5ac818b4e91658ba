//! Draws rows/s over time for every simulated case (the CSV files `simulator --csv DIR` wrote),
//! prefix against serial, one panel per case, into a PNG.
//!
//!     plot DIR OUT.png [FONT.ttf]
//!
//! Text is drawn with the TrueType font given (default: Debian's DejaVu Sans).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::register_font;

/// The cases the simulator wrote CSV files for (`<case>-prefix.csv`), by name.
fn cases(dir: &Path) -> Vec<String> {
    let mut cases: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix("-prefix.csv")
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(out)) = (args.first(), args.get(1)) else {
        return Err("usage: plot DIR OUT.png [FONT.ttf]".into());
    };
    let font = args
        .get(2)
        .map(String::as_str)
        .unwrap_or("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
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
            "no <case>-prefix.csv files in {dir}; run `simulator --csv {dir}` first"
        )
        .into());
    }
    let rows = cases.len().div_ceil(2);
    let root = BitMapBackend::new(out, (1600, 450 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Simulated rows/s over time: prefix (blue) and serial (red)",
        ("sans-serif", 28),
    )?;
    for (panel, case) in root.split_evenly((rows, 2)).iter().zip(&cases) {
        let prefix = read(&Path::new(dir).join(format!("{case}-prefix.csv")));
        let serial = read(&Path::new(dir).join(format!("{case}-serial.csv")));
        // The prefix run is the short one; show it whole and the serial run over the same span.
        let span = prefix.last().map_or(60.0, |p| p.0 + 5.0).max(30.0);
        let top = prefix
            .iter()
            .chain(&serial)
            .map(|p| p.1)
            .fold(1.0, f64::max)
            * 1.1;
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
        chart.draw_series(LineSeries::new(
            prefix.iter().copied(),
            BLUE.stroke_width(2),
        ))?;
        chart.draw_series(LineSeries::new(
            serial.iter().copied().filter(|p| p.0 <= span),
            RED.stroke_width(2),
        ))?;
    }
    root.present()?;
    println!("wrote {out}");
    Ok(())
}
