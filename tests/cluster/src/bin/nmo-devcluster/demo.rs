//! The main job: filled in once the operator is wired (see README).
pub fn run() -> i32 {
    eprintln!("demo: not wired yet");
    1
}
