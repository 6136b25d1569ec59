-- Labels in their own column, so that a list with a label selector reads
-- only the labels of the rows it skips.
ALTER TABLE objects ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
UPDATE objects SET labels = COALESCE(json_extract(data, '$.metadata.labels'), '{}');
