fn main() {
    println!("node-maintenance-operator: not wired yet");
}
