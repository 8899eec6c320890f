package kafka2pc.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.execution.streaming.sources.PackedRowCommitMessage;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What one written partition reports to the driver: the Python writer's result row
 * (partition, attempt, input rows, committable JSON), as a row for the mapPartitions path
 * and, as JSON, in the DataSource's commit message.
 */
record PreparedPartition(int partition, int attempt, long inputRows, String committable) {

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

    /**
     * The DataSource's commit message: {@link #toJson} in a class of Spark's own. The driver
     * deserialises task results with its application class loader, not the session's: on a
     * Spark Connect server that got our jar as a session artifact, a message of our class
     * fails the job ("ClassNotFound with classloader"), measured on PySpark 4.3.
     */
    WriterCommitMessage message() {
        Object[] values = {UTF8String.fromString(toJson())};
        return new PackedRowCommitMessage(new InternalRow[] {new GenericInternalRow(values)});
    }

    /** The JSON a {@link #message} carries; null for any other message. */
    static String json(WriterCommitMessage message) {
        if (message instanceof PackedRowCommitMessage packed && packed.rows().length == 1) {
            return packed.rows()[0].getUTF8String(0).toString();
        }
        return null;
    }
}
