//! `kubectl nm`: see [`kubectl_nm`]. Exit status: 0 done (Succeeded, stopped; preflight: nothing
//! blocks), 1 any error, 2 timed out (the blockers printed; preflight: something blocks), 3
//! denied at admission, 4 the API server could not reach the webhook or answered 5xx.

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // One rustls provider, as the operator installs it: with several compiled in, rustls
    // refuses to pick one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let code = kubectl_nm::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .await;
    ExitCode::from(code)
}
