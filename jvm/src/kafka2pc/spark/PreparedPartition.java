package kafka2pc.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * What one written partition reports to the driver: the Python writer's result row
 * (partition, attempt, input rows, committable JSON), as a row for the mapPartitions path
 * and as the DataSource's commit message.
 */
record PreparedPartition(int partition, int attempt, long inputRows, String committable)
        implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;

    /** The Python writer's {@code RESULT_SCHEMA}. */
    static final StructType RESULT_SCHEMA = new StructType()
            .add("partition", DataTypes.IntegerType, false)
            .add("attempt", DataTypes.IntegerType, false)
            .add("input_rows", DataTypes.LongType, false)
            .add("committable", DataTypes.StringType, false);

    Row toRow() {
        return RowFactory.create(partition, attempt, inputRows, committable);
    }

    /** One JSON object, the result row's fields by name (read back by the Python client). */
    String toJson() {
        StringBuilder out = new StringBuilder(committable.length() + 96);
        out.append("{\"partition\": ").append(partition)
                .append(", \"attempt\": ").append(attempt)
                .append(", \"input_rows\": ").append(inputRows)
                .append(", \"committable\": ");
        return Committable.string(out, committable).append('}').toString();
    }
}
