//! The charts, drawn with plotters' SVG backend into strings.
//!
//! Every chart takes already-computed numbers (the statistics are in
//! [`crate::stats`]), picks a time unit from its largest value, and gives
//! each series the colour of its index in [`colour`], so a target has the
//! same colour in every chart. Names go in a left margin wide enough for a
//! target URL, never on a crowded x axis.

use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::stats::Unit;

/// What a chart function returns: the SVG document.
pub type ChartResult = Result<String, Box<dyn std::error::Error + Send + Sync>>;

/// Width of every chart in pixels.
pub const WIDTH: u32 = 960;
/// Width of the left margin that holds series names.
const LABEL_W: u32 = 250;
/// Font of every text.
const FONT: &str = "sans-serif";

/// The colour of series `i`: the Okabe–Ito palette (distinct for most kinds
/// of colour blindness), then hues spaced by the golden angle.
pub fn colour(i: usize) -> RGBColor {
    const OKABE_ITO: [(u8, u8, u8); 7] = [
        (0, 114, 178),
        (230, 159, 0),
        (0, 158, 115),
        (204, 121, 167),
        (213, 94, 0),
        (86, 180, 233),
        (0, 0, 0),
    ];
    if let Some(&(r, g, b)) = OKABE_ITO.get(i) {
        return RGBColor(r, g, b);
    }
    let h = ((i - OKABE_ITO.len()) as f64 * 0.618_034 + 0.1).fract();
    let (r, g, b) = HSLColor(h, 0.7, 0.4).to_backend_color().rgb;
    RGBColor(r, g, b)
}

/// The colour of each part of the split, in [`crate::input::PART_NAMES`]
/// order.
pub const PART_COLOURS: [RGBColor; 6] = [
    RGBColor(230, 159, 0),
    RGBColor(0, 114, 178),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(213, 94, 0),
];

fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).color(&BLACK)
}

/// Shortens a name to fit the label margin.
fn short(name: &str) -> String {
    const MAX: usize = 34;
    if name.chars().count() <= MAX {
        return name.to_owned();
    }
    let tail: String = name
        .chars()
        .rev()
        .take(MAX - 1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

/// One row of the box plot.
#[derive(Debug, Clone)]
pub struct BoxRow {
    /// Series name.
    pub label: String,
    /// Its colour's index: the series' own, or its target's where several
    /// rows are one target (a sweep's points).
    pub colour: usize,
    /// p5, p25, p50, p75, p95 in ns of the trimmed values; `None` without
    /// ok probes.
    pub stats: Option<[f64; 5]>,
}

fn names<DB: DrawingBackend, X: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    x: f64,
    labels: &[String],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = font(14).pos(Pos::new(HPos::Right, VPos::Center));
    let n = labels.len();
    for (i, l) in labels.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(x, row_y(i, n)));
        root.draw_text(&short(l), &style, (px - 10, py))?;
    }
    Ok(())
}

fn no_data<DB: DrawingBackend, X: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    x: f64,
    i: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (px, py) = chart.backend_coord(&(x, i));
    let style = font(13)
        .color(&RGBColor(150, 30, 30))
        .pos(Pos::new(HPos::Left, VPos::Center));
    root.draw_text("no successful probes", &style, (px + 10, py))
}

/// The mesh of a chart with a row per series (box, violin, parts): an x
/// axis with `desc`, no y labels (the names are drawn in the margin).
fn rows_mesh<DB: DrawingBackend, X>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    desc: impl Into<String>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .max_light_lines(1)
        .light_line_style(RGBColor(238, 238, 238))
        .bold_line_style(RGBColor(205, 205, 205))
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(desc)
        .x_label_style(font(13))
        .axis_desc_style(font(14))
        .x_label_formatter(&|v| axis_number(*v))
        .draw()
}

/// The y of row `i` of `n`: the first row at the top.
fn row_y(i: usize, n: usize) -> f64 {
    (n - 1 - i) as f64
}

fn rows_height(n: usize) -> u32 {
    (90 + 56 * n.max(1)) as u32
}

/// Horizontal box plots: box p25–p75, a line at the median, whiskers at
/// p5 and p95 (of values left after the z-score trim).
pub fn box_plot(rows: &[BoxRow]) -> ChartResult {
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH, rows_height(rows.len()))).into_drawing_area();
        root.fill(&WHITE)?;
        let max = rows
            .iter()
            .filter_map(|r| r.stats)
            .map(|s| s[4])
            .fold(0.0, f64::max);
        let min = rows
            .iter()
            .filter_map(|r| r.stats)
            .map(|s| s[0])
            .fold(f64::INFINITY, f64::min);
        let unit = Unit::for_max(max);
        let (lo, hi) = padded(min.min(max), max, unit);
        let n = rows.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(LABEL_W)
            .build_cartesian_2d(lo..hi, -0.5..n - 0.5)?;
        rows_mesh(&mut chart, format!("RTT ({})", unit.name))?;
        for (i, r) in rows.iter().enumerate() {
            let y = row_y(i, rows.len());
            let c = colour(r.colour);
            let Some(s) = r.stats else {
                no_data(&root, &chart, lo, y)?;
                continue;
            };
            let s = s.map(|v| v / unit.ns);
            chart.draw_series([Rectangle::new(
                [(s[1], y - 0.28), (s[3], y + 0.28)],
                c.mix(0.25).filled(),
            )])?;
            chart.draw_series([Rectangle::new(
                [(s[1], y - 0.28), (s[3], y + 0.28)],
                c.stroke_width(2),
            )])?;
            let line =
                |a: (f64, f64), b: (f64, f64), w| PathElement::new(vec![a, b], c.stroke_width(w));
            chart.draw_series([
                line((s[2], y - 0.28), (s[2], y + 0.28), 3),
                line((s[0], y), (s[1], y), 1),
                line((s[3], y), (s[4], y), 1),
                line((s[0], y - 0.14), (s[0], y + 0.14), 1),
                line((s[4], y - 0.14), (s[4], y + 0.14), 1),
            ])?;
        }
        names(
            &root,
            &chart,
            lo,
            &rows.iter().map(|r| r.label.clone()).collect::<Vec<_>>(),
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// A lower and upper axis bound in `unit`s around `min..max` ns, with room
/// on both sides.
fn padded(min: f64, max: f64, unit: Unit) -> (f64, f64) {
    if max.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !min.is_finite() {
        return (0.0, 1.0);
    }
    let span = (max - min).max(max * 0.05);
    let lo = ((min - span * 0.08) / unit.ns).max(0.0);
    let hi = (max + span * 0.08) / unit.ns;
    (lo, hi)
}

/// A number on an axis: no more digits than it needs.
fn axis_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}").trim_end_matches(".0").to_owned()
    } else if a >= 1.0 {
        trim_zeros(format!("{v:.2}"))
    } else {
        trim_zeros(format!("{v:.3}"))
    }
}

fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// One row of the violin plot: a density curve over (value, density).
#[derive(Debug, Clone)]
pub struct ViolinRow {
    /// Series name.
    pub label: String,
    /// The density: (value in ns, or log10 of ns when log, density).
    pub kde: Vec<(f64, f64)>,
    /// The median in ns, drawn as a white tick.
    pub median: Option<f64>,
}

/// Horizontal violins, each scaled to the same height; with `log`, the x
/// axis is logarithmic and each `kde` is in log10(ns).
pub fn violin_plot(rows: &[ViolinRow], log: bool) -> ChartResult {
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH, rows_height(rows.len()))).into_drawing_area();
        root.fill(&WHITE)?;
        let to_ns = |x: f64| if log { 10f64.powf(x) } else { x };
        let xs = rows.iter().flat_map(|r| r.kde.iter().map(|p| to_ns(p.0)));
        let (min, max) = xs.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
        let unit = Unit::for_max(max);
        let n = rows.len() as f64;
        let mut builder = ChartBuilder::on(&root);
        let chart = builder
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(LABEL_W);
        let desc = format!(
            "RTT ({}{})",
            unit.name,
            if log { ", log scale" } else { "" }
        );
        if log {
            let min = if min.is_finite() { min } else { 1.0 };
            let lo = (min.max(1.0) / unit.ns).max(1e-9);
            let hi = (max / unit.ns).max(lo * 10.0);
            let mut chart = chart.build_cartesian_2d((lo..hi).log_scale(), -0.5..n - 0.5)?;
            rows_mesh(&mut chart, desc)?;
            violins(
                &root,
                &mut chart,
                rows,
                &|x| 10f64.powf(x) / unit.ns,
                unit,
                lo,
            )?;
        } else {
            let (lo, hi) = padded(min.min(max), max, unit);
            let mut chart = chart.build_cartesian_2d(lo..hi, -0.5..n - 0.5)?;
            rows_mesh(&mut chart, desc)?;
            violins(&root, &mut chart, rows, &|x| x / unit.ns, unit, lo)?;
        }
        root.present()?;
    }
    Ok(svg)
}

fn violins<DB: DrawingBackend, X: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    rows: &[ViolinRow],
    x: &dyn Fn(f64) -> f64,
    unit: Unit,
    left: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for (i, r) in rows.iter().enumerate() {
        let y = row_y(i, rows.len());
        let top = r.kde.iter().map(|p| p.1).fold(0.0, f64::max);
        if r.kde.is_empty() || top <= 0.0 {
            no_data(root, chart, left, y)?;
            continue;
        }
        let half = |d: f64| d / top * 0.42;
        let mut outline: Vec<(f64, f64)> =
            r.kde.iter().map(|&(v, d)| (x(v), y + half(d))).collect();
        outline.extend(r.kde.iter().rev().map(|&(v, d)| (x(v), y - half(d))));
        let c = colour(i);
        chart.draw_series([Polygon::new(outline.clone(), c.mix(0.35).filled())])?;
        chart.draw_series([PathElement::new(outline, c.stroke_width(1))])?;
        if let Some(m) = r.median {
            let m = m / unit.ns;
            chart.draw_series([PathElement::new(
                vec![(m, y - 0.2), (m, y + 0.2)],
                BLACK.stroke_width(2),
            )])?;
        }
    }
    names(
        root,
        chart,
        left,
        &rows.iter().map(|r| r.label.clone()).collect::<Vec<_>>(),
    )
}

/// One curve of the percentile plot.
#[derive(Debug, Clone)]
pub struct PercentileCurve {
    /// Series name.
    pub label: String,
    /// Colour index.
    pub index: usize,
    /// (percentile as 0..1, value ns), ascending.
    pub points: Vec<(f64, f64)>,
}

/// The percentile labels of the x axis, at −log10(1 − p) = 0, 1, 2…
const NINES: [&str; 6] = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];

/// HdrHistogram's percentile distribution plot: x is the percentile on a
/// log scale of 1/(1 − p), up to 99.999 %, y the RTT.
pub fn percentile_plot(curves: &[PercentileCurve]) -> ChartResult {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 460 + band_height(curves.len())))
            .into_drawing_area();
        root.fill(&WHITE)?;
        let (root_area, legend) = root.split_vertically(460);
        let max = curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        let unit = Unit::for_max(max);
        let mut chart = ChartBuilder::on(&root_area)
            .margin(12)
            .margin_right(40)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..5.0, 0.0..(max * 1.05 / unit.ns).max(1e-9))?;
        chart
            .configure_mesh()
            .max_light_lines(1)
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(205, 205, 205))
            .x_labels(6)
            .x_label_formatter(&|v: &f64| {
                let r = v.round();
                if (v - r).abs() < 1e-6 && (0.0..=5.0).contains(&r) {
                    NINES[r as usize].to_owned()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| axis_number(*v))
            .x_desc("percentile")
            .y_desc(format!("RTT ({})", unit.name))
            .label_style(font(13))
            .axis_desc_style(font(14))
            .draw()?;
        for c in curves {
            let col = colour(c.index);
            let pts = c
                .points
                .iter()
                .filter(|(p, _)| *p < 1.0)
                .map(|&(p, v)| (-(1.0 - p).log10(), v / unit.ns))
                .filter(|(x, _)| *x <= 5.0);
            chart
                .draw_series(LineSeries::new(pts, col.stroke_width(2)))?
                .label(short(&c.label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3))
                });
        }
        legend_band(
            &legend,
            &curves
                .iter()
                .map(|c| (c.label.clone(), colour(c.index)))
                .collect::<Vec<_>>(),
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// One time bucket of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Start, seconds from the first probe of the page.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Probes sent in it (`None` when unknown: hlog).
    pub sent: Option<u64>,
    /// Probes lost (timeouts and errors).
    pub lost: u64,
    /// p50 and p99 of the ok RTTs in ns, if any.
    pub p50_p99: Option<(f64, f64)>,
}

/// A series' p50 and p99 over time: loss marked with red triangles on the
/// x axis, buckets with probes but no reply shaded as outages.
pub fn time_series(label: &str, index: usize, buckets: &[Bucket]) -> ChartResult {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 260)).into_drawing_area();
        root.fill(&WHITE)?;
        let max = buckets
            .iter()
            .filter_map(|b| b.p50_p99)
            .map(|p| p.1)
            .fold(0.0, f64::max);
        let unit = Unit::for_max(max);
        let end = buckets
            .iter()
            .map(|b| b.end_s)
            .fold(0.0, f64::max)
            .max(1e-3);
        // A log axis: a p99 spike sets the top, and on a linear axis it
        // flattened p50 along the bottom; on a log one both stay readable.
        let min = buckets
            .iter()
            .filter_map(|b| b.p50_p99)
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min);
        let top = (max * 1.1 / unit.ns).max(1e-9);
        let bottom = if min.is_finite() {
            (min * 0.8 / unit.ns).clamp(1e-9, top / 2.0)
        } else {
            top / 10.0
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(short(label), font(14))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end, (bottom..top).log_scale())?;
        chart
            .configure_mesh()
            .max_light_lines(1)
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(205, 205, 205))
            .x_desc("time since the first probe (s)")
            .y_desc(format!("RTT ({}, log scale)", unit.name))
            .label_style(font(12))
            .axis_desc_style(font(13))
            .x_label_formatter(&|v| axis_number(*v))
            .y_label_formatter(&|v| axis_number(*v))
            .draw()?;
        let outage: Vec<&Bucket> = buckets
            .iter()
            .filter(|b| b.p50_p99.is_none() && b.sent.is_none_or(|s| s > 0))
            .collect();
        let grey = RGBColor(120, 120, 120).mix(0.3);
        if !outage.is_empty() {
            chart
                .draw_series(
                    outage.iter().map(|b| {
                        Rectangle::new([(b.start_s, bottom), (b.end_s, top)], grey.filled())
                    }),
                )?
                .label("outage (no reply)")
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], grey.filled()));
        }
        let c = colour(index);
        let mid = |b: &Bucket| (b.start_s + b.end_s) / 2.0;
        let line = |pick: fn((f64, f64)) -> f64| {
            // Break the line at a bucket without replies.
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for b in buckets {
                match b.p50_p99 {
                    Some(p) => runs
                        .last_mut()
                        .unwrap_or(&mut Vec::new())
                        .push((mid(b), pick(p) / unit.ns)),
                    None => runs.push(Vec::new()),
                }
            }
            runs.retain(|r| !r.is_empty());
            runs
        };
        let light = c.mix(0.45);
        for (k, run) in line(|p| p.1).into_iter().enumerate() {
            let s = chart.draw_series(LineSeries::new(run, light.stroke_width(2)))?;
            if k == 0 {
                s.label("p99").legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], light.stroke_width(2))
                });
            }
        }
        for (k, run) in line(|p| p.0).into_iter().enumerate() {
            let s = chart.draw_series(LineSeries::new(run, c.stroke_width(2)))?;
            if k == 0 {
                s.label("p50").legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            }
        }
        let red = RGBColor(200, 0, 0);
        if buckets.iter().any(|b| b.lost > 0) {
            chart
                .draw_series(
                    buckets
                        .iter()
                        .filter(|b| b.lost > 0)
                        .map(|b| TriangleMarker::new((mid(b), bottom * 1.05), 5, red.filled())),
                )?
                .label("loss (timeouts, errors)")
                .legend(move |(x, y)| TriangleMarker::new((x + 7, y), 5, red.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(font(12))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// One bar of "where the time goes".
#[derive(Debug, Clone)]
pub struct PartsBar {
    /// Series name.
    pub label: String,
    /// Median of each part in ns, in [`crate::input::PART_NAMES`] order.
    pub parts: [Option<f64>; 6],
    /// Median RTT in ns, drawn as a black tick.
    pub rtt_p50: f64,
}

/// Stacked horizontal bars of the median parts, with the median RTT marked.
pub fn parts_bars(bars: &[PartsBar]) -> ChartResult {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, rows_height(bars.len()) + 40))
            .into_drawing_area();
        root.fill(&WHITE)?;
        let (area, legend) = root.split_vertically(rows_height(bars.len()));
        let total = |b: &PartsBar| b.parts.iter().flatten().sum::<f64>();
        let max = bars
            .iter()
            .map(|b| total(b).max(b.rtt_p50))
            .fold(0.0, f64::max);
        let unit = Unit::for_max(max);
        let n = bars.len() as f64;
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(LABEL_W)
            .build_cartesian_2d(0.0..(max * 1.05 / unit.ns).max(1e-9), -0.5..n - 0.5)?;
        rows_mesh(&mut chart, format!("median of each part ({})", unit.name))?;
        for (i, b) in bars.iter().enumerate() {
            let y = row_y(i, bars.len());
            let mut x = 0.0;
            for (k, p) in b.parts.iter().enumerate() {
                let Some(p) = p else { continue };
                let w = p / unit.ns;
                chart.draw_series([Rectangle::new(
                    [(x, y - 0.3), (x + w, y + 0.3)],
                    PART_COLOURS[k].filled(),
                )])?;
                x += w;
            }
            let m = b.rtt_p50 / unit.ns;
            chart.draw_series([PathElement::new(
                vec![(m, y - 0.4), (m, y + 0.4)],
                BLACK.stroke_width(2),
            )])?;
        }
        names(
            &root,
            &chart,
            0.0,
            &bars.iter().map(|b| b.label.clone()).collect::<Vec<_>>(),
        )?;
        // The legend, in its own band under the chart.
        let style = font(13).pos(Pos::new(HPos::Left, VPos::Center));
        let mut x = 20;
        for (k, name) in crate::input::PART_NAMES.iter().enumerate() {
            legend.draw(&Rectangle::new(
                [(x, 8), (x + 14, 22)],
                PART_COLOURS[k].filled(),
            ))?;
            let text = name.replace('_', " ");
            legend.draw_text(&text, &style, (x + 19, 15))?;
            x += 34 + 7 * text.len() as i32;
        }
        legend.draw(&PathElement::new(
            vec![(x, 6), (x, 24)],
            BLACK.stroke_width(2),
        ))?;
        legend.draw_text("median RTT", &style, (x + 6, 15))?;
        root.present()?;
    }
    Ok(svg)
}

/// One target's sweep curve.
#[derive(Debug, Clone)]
pub struct SweepCurve {
    /// Target name.
    pub label: String,
    /// Colour index.
    pub index: usize,
    /// (interval ns, p25, p50, p75 ns) ascending by interval.
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// The latency-vs-interval curve: log-log, the p50 line with a p25–p75 band,
/// one colour per target.
pub fn sweep_plot(curves: &[SweepCurve]) -> ChartResult {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 500 + band_height(curves.len())))
            .into_drawing_area();
        root.fill(&WHITE)?;
        let (chart_area, legend) = root.split_vertically(500);
        let pts = || curves.iter().flat_map(|c| c.points.iter());
        let (xmin, xmax) = pts().fold((f64::INFINITY, 0.0f64), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
        let (ymin, ymax) = pts().fold((f64::INFINITY, 0.0f64), |(a, b), p| {
            (a.min(p.1), b.max(p.3))
        });
        // No point at all (every target dead): a plain 1..10 axis, not
        // an infinite one (plotters' log axis loops on it).
        let finite = |v: f64| if v.is_finite() { v } else { 1.0 };
        let xr = (finite(xmin).max(1.0) / 1.5)..(xmax.max(10.0) * 1.5);
        let yr = (finite(ymin).max(1.0) / 1.3)..(ymax.max(10.0) * 1.3);
        let (xr, yr) = (xr.clone(), yr.clone());
        let mut chart = ChartBuilder::on(&chart_area)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d(xr.clone().log_scale(), yr.clone().log_scale())?;
        chart
            .configure_mesh()
            .max_light_lines(1)
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(205, 205, 205))
            .y_labels(0)
            .y_label_formatter(&|_| String::new())
            .x_desc("probe interval (log scale)")
            .y_desc("RTT (log scale): p50, p25–p75 band")
            .label_style(font(13))
            .axis_desc_style(font(14))
            .x_label_formatter(&|v| tick_ns(*v))
            .draw()?;
        // plotters labels only part of a short log axis; draw 1-2-5 ticks
        // of every decade in range, with grid lines.
        let style = font(13).pos(Pos::new(HPos::Right, VPos::Center));
        for v in nice_log_ticks(yr.start, yr.end) {
            chart.draw_series([PathElement::new(
                vec![(xr.start, v), (xr.end, v)],
                RGBColor(225, 225, 225).stroke_width(1),
            )])?;
            let (px, py) = chart.backend_coord(&(xr.start, v));
            root.draw_text(&tick_ns(v), &style, (px - 6, py))?;
        }
        for c in curves {
            let col = colour(c.index);
            let mut band: Vec<(f64, f64)> = c.points.iter().map(|p| (p.0, p.1)).collect();
            band.extend(c.points.iter().rev().map(|p| (p.0, p.3)));
            chart.draw_series([Polygon::new(band, col.mix(0.18).filled())])?;
            chart
                .draw_series(LineSeries::new(
                    c.points.iter().map(|p| (p.0, p.2)),
                    col.stroke_width(2),
                ))?
                .label(short(&c.label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3))
                });
            chart.draw_series(
                c.points
                    .iter()
                    .map(|p| Circle::new((p.0, p.2), 4, col.filled())),
            )?;
        }
        legend_band(
            &legend,
            &curves
                .iter()
                .map(|c| (c.label.clone(), colour(c.index)))
                .collect::<Vec<_>>(),
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// Height of a [`legend_band`] of `n` entries: two per row.
fn band_height(n: usize) -> u32 {
    (n.div_ceil(2) * 22 + 12) as u32
}

/// A legend under a chart, two entries per row, so it never covers data.
fn legend_band<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    items: &[(String, RGBColor)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = font(13).pos(Pos::new(HPos::Left, VPos::Center));
    for (k, (label, c)) in items.iter().enumerate() {
        let x = 80 + (k % 2) as i32 * 440;
        let y = 14 + (k / 2) as i32 * 22;
        area.draw(&PathElement::new(
            vec![(x, y), (x + 22, y)],
            c.stroke_width(3),
        ))?;
        let mut text = label.clone();
        if text.chars().count() > 58 {
            text = format!(
                "…{}",
                text.chars()
                    .rev()
                    .take(57)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<String>()
            );
        }
        area.draw_text(&text, &style, (x + 30, y))?;
    }
    Ok(())
}

/// A duration on an axis tick: `50 µs`, `1 ms`, `2.5 s`.
fn tick_ns(ns: f64) -> String {
    let u = Unit::for_max(ns);
    format!("{} {}", axis_number(ns / u.ns), u.name)
}

/// 1, 2 and 5 times every power of ten in `lo..=hi`; only 1s when that
/// would crowd the axis (more than three decades).
fn nice_log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    if lo.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        || hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater)
    {
        return out;
    }
    let decades = (hi / lo).log10();
    let steps: &[f64] = if decades > 3.0 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut p = 10f64.powf(lo.log10().floor());
    while p <= hi {
        for m in steps {
            let v = p * m;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        p *= 10.0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_1_2_5() {
        assert_eq!(nice_log_ticks(30e3, 900e3), vec![50e3, 100e3, 200e3, 500e3]);
        assert_eq!(nice_log_ticks(1.0, 1e6).len(), 7);
    }

    #[test]
    fn colours_differ_for_many_series() {
        let cs: Vec<RGBColor> = (0..24).map(colour).collect();
        for i in 0..cs.len() {
            for j in 0..i {
                assert_ne!(cs[i], cs[j], "series {i} and {j} share a colour");
            }
        }
    }

    #[test]
    fn every_chart_draws_with_data_and_without() {
        let rows = vec![
            BoxRow {
                label: "tcp://127.0.0.1:1".into(),
                colour: 0,
                stats: Some([10e3, 20e3, 25e3, 30e3, 50e3]),
            },
            BoxRow {
                label: "dead".into(),
                colour: 1,
                stats: None,
            },
        ];
        let svg = box_plot(&rows).unwrap();
        assert!(
            svg.contains("<svg")
                && svg.contains("no successful probes")
                && svg.contains("tcp://127.0.0.1:1")
        );
        assert!(
            box_plot(&[BoxRow {
                label: "x".into(),
                colour: 0,
                stats: None
            }])
            .unwrap()
            .contains("<svg")
        );
        let v = vec![ViolinRow {
            label: "a".into(),
            kde: vec![(1.0, 0.1), (2.0, 0.5), (3.0, 0.1)],
            median: Some(2.0),
        }];
        assert!(violin_plot(&v, false).unwrap().contains("<polygon"));
        let vl = vec![ViolinRow {
            label: "a".into(),
            kde: vec![(3.0, 0.1), (4.0, 0.5), (5.0, 0.1)],
            median: Some(1e4),
        }];
        assert!(violin_plot(&vl, true).unwrap().contains("log scale"));
        let p = percentile_plot(&[PercentileCurve {
            label: "a".into(),
            index: 0,
            points: vec![(0.0, 1e3), (0.99, 2e3), (0.9999, 9e3)],
        }])
        .unwrap();
        assert!(p.contains("99.99%"));
        let b = [
            Bucket {
                start_s: 0.0,
                end_s: 1.0,
                sent: Some(10),
                lost: 1,
                p50_p99: Some((1e3, 2e3)),
            },
            Bucket {
                start_s: 1.0,
                end_s: 2.0,
                sent: Some(10),
                lost: 10,
                p50_p99: None,
            },
        ];
        assert!(time_series("a", 0, &b).unwrap().contains("outage"));
        let bars = [PartsBar {
            label: "a".into(),
            parts: [Some(1e3), Some(5e3), None, None, None, Some(2e3)],
            rtt_p50: 8e3,
        }];
        assert!(parts_bars(&bars).unwrap().contains("client wake"));
        let s = sweep_plot(&[SweepCurve {
            label: "a".into(),
            index: 0,
            points: vec![(1e3, 1e4, 2e4, 3e4), (1e9, 5e4, 6e4, 9e4)],
        }])
        .unwrap();
        assert!(s.contains("<polygon") || s.contains("<path"));
    }
}
