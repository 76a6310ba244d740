//! `prober report`: reads what prober wrote (JSON lines from `prober run -o
//! json`, the daemon's JSONL files, `prober sweep`, and HdrHistogram
//! interval logs), computes the statistics and draws one self-contained
//! HTML page of inline SVG charts.
//!
//! - [`input`]: reading and filtering files into [`Series`], with a message
//!   per problem file and the rest still read.
//! - [`stats`]: the `describe()` table (through prober-core's
//!   [`prober_core::stats::Dist`], so the numbers match the run's own
//!   summary), exact quantiles, the z-score trim, and a kernel density
//!   estimate with Silverman's bandwidth.
//! - [`charts`]: the SVG charts, drawn with plotters.
//! - [`html`]: the page.
//!
//! # Why a crate of its own
//! The report reads files and draws; it needs plotters and an SVG
//! rasteriser that neither the probes nor the daemon need, and it opens no
//! socket. Keeping it apart keeps the `prober` binary's other crates lean and
//! the layering test simple: this crate depends on prober-core only.
//!
//! May use: `prober-core`.
//! May not: open a socket, or know how results were measured beyond the JSON
//!  lines and hlog files it reads.

#![forbid(unsafe_code)]

pub mod charts;
pub mod html;
pub mod input;
pub mod stats;

pub use self::html::{Page, render_page};
pub use self::input::{
    Filter, InputFile, Probe, ProbeOutcome, Series, Settings, read_bytes, read_file,
};

/// Rasterises one chart's SVG to PNG at twice its size (for sharp text on
/// high-density screens), with the system's fonts for its text.
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width() * 2, size.height() * 2)
        .ok_or_else(|| "the chart has no area".to_owned())?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(2.0, 2.0),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}
