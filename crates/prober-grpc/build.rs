//! Generates the Echo service from `proto/prober/v1/echo.proto` with the
//! protoc binary vendored by `protoc-bin-vendored`, so no system protoc is
//! needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["../../proto/prober/v1/echo.proto"],
        &["../../proto"],
    )?;
    println!("cargo:rerun-if-changed=../../proto/prober/v1/echo.proto");
    Ok(())
}
