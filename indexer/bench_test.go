package indexer_test

func closeBenchFixtures() {}
