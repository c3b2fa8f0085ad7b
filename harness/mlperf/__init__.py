"""What is MLPerf's: benchmark definitions, scorers, compliance tests, the results tree and
MLCommons' checker runner. No luigi imports."""
