//! `prober report`: read result files, draw the page or the charts.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use prober_report::{Filter, Page, read_bytes};

use crate::cli::{ReportArgs, ReportFormat, TableFormat};

/// Runs `prober report`.
pub(crate) fn report(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    if let (Some(a), Some(b)) = (args.since, args.until)
        && a >= b
    {
        bail!("--since must be before --until");
    }
    let filter = Filter {
        targets: args.target.clone(),
        since_ns: args.since,
        until_ns: args.until,
    };
    let t0 = std::time::Instant::now();
    let mut page = Page {
        log_violin: args.log,
        buckets: args.buckets as usize,
        ..Page::default()
    };
    for path in &args.files {
        let read = if path.as_os_str() == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("reading standard input")?;
            read_bytes(Path::new("(stdin)"), &buf, &filter)
        } else {
            prober_report::read_file(path, &filter)
        };
        match read {
            Ok(f) => {
                for n in &f.notes {
                    eprintln!("prober: warning: {}: {n}", f.path.display());
                }
                page.files.push(f);
            }
            Err(e) => {
                eprintln!("prober: {e}");
                page.failed.push(e.to_string());
            }
        }
    }
    if page.files.is_empty() {
        bail!("no file could be read, so there is nothing to draw");
    }
    tracing::debug!("read in {:?}", t0.elapsed());
    let rendered = prober_report::render_page(&page)
        .map_err(|e| anyhow::anyhow!("drawing the charts: {e}"))?;
    tracing::debug!("drawn in {:?}", t0.elapsed());
    if let Some(table) = args.table {
        let text = match table {
            TableFormat::Md => &rendered.table_md,
            TableFormat::Csv => &rendered.table_csv,
        };
        match &args.output {
            Some(p) => write(p, text.as_bytes())?,
            None => print!("{text}"),
        }
    } else {
        match args.format {
            ReportFormat::Html => {
                let out = args
                    .output
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("report.html"));
                write(&out, rendered.html.as_bytes())?;
                eprintln!(
                    "prober: wrote {} ({}, {} KiB)",
                    out.display(),
                    prober_core::quote::count(rendered.charts.len() as u64, "chart"),
                    rendered.html.len() / 1024
                );
            }
            ReportFormat::Svg | ReportFormat::Png => {
                let dir = args
                    .output
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("report"));
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                for (name, svg) in &rendered.charts {
                    if args.format == ReportFormat::Svg {
                        write(&dir.join(format!("{name}.svg")), svg.as_bytes())?;
                    } else {
                        let png = prober_report::svg_to_png(svg)
                            .map_err(|e| anyhow::anyhow!("rendering {name} as PNG: {e}"))?;
                        write(&dir.join(format!("{name}.png")), &png)?;
                    }
                }
                eprintln!(
                    "prober: wrote {} to {}",
                    prober_core::quote::count(rendered.charts.len() as u64, "chart"),
                    dir.display()
                );
            }
        }
    }
    Ok(if page.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
