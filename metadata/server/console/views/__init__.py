"""The console's pure side: view models (`data`), formatting (`formats`), SVG charts (`charts`)."""
