//! Print our `luksDump`-style text for an image: `cargo run --example luksdump IMAGE [--json]`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: luksdump IMAGE [--json]")?;
    let f = std::fs::File::open(path)?;
    let loaded = cryptkeep_luks::Luks::load(&f)?;
    for n in &loaded.notices {
        eprintln!("notice: {n}");
    }
    if args.iter().any(|a| a == "--json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&loaded.luks.dump_json())?
        );
    } else {
        print!("{}", loaded.luks.dump());
    }
    Ok(())
}
