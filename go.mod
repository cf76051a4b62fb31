module github.com/elasticps/elasticps

go 1.26
