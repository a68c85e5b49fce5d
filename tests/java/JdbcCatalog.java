// The PostgreSQL JDBC driver's function and procedure listings for
// pg_wire/tools_catalog.rs, as DBeaver's navigator asks for them:
// DatabaseMetaData.getFunctions, getProcedures and their columns.
//
// Usage: java -cp postgresql.jar JdbcCatalog.java URL USER PASSWORD SCHEMA NAME
// (Java 17's single-file source launcher). Prints one JSON object, never a
// stack trace: for each call, {"rows": [[schema, name], ...]} or
// {"error": the server's message, "sqlstate": code}.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

public class JdbcCatalog {
    /** A metadata call. */
    interface Call {
        ResultSet run(DatabaseMetaData meta) throws SQLException;
    }

    public static void main(String[] argv) {
        Properties properties = new Properties();
        properties.setProperty("user", argv[1]);
        properties.setProperty("password", argv[2]);
        properties.setProperty("connectTimeout", "10");
        String schema = argv[3], name = argv[4];
        StringBuilder out = new StringBuilder("{");
        try (Connection conn = DriverManager.getConnection(argv[0], properties)) {
            DatabaseMetaData meta = conn.getMetaData();
            out.append("\"functions\": ")
                .append(listed(meta, m -> m.getFunctions(null, schema, name), "FUNCTION_SCHEM", "FUNCTION_NAME"))
                .append(", \"function_columns\": ")
                .append(listed(meta, m -> m.getFunctionColumns(null, schema, name, "%"), "FUNCTION_SCHEM", "FUNCTION_NAME"))
                .append(", \"procedures\": ")
                .append(listed(meta, m -> m.getProcedures(null, schema, name), "PROCEDURE_SCHEM", "PROCEDURE_NAME"))
                .append(", \"procedure_columns\": ")
                .append(listed(meta, m -> m.getProcedureColumns(null, schema, name, "%"), "PROCEDURE_SCHEM", "PROCEDURE_NAME"));
        } catch (SQLException e) {
            out.append("\"connect\": ").append(error(e));
        }
        System.out.println(out.append("}"));
    }

    /** The (schema, name) of each row `call` answers, or its error. */
    static String listed(DatabaseMetaData meta, Call call, String schemaColumn, String nameColumn) {
        try (ResultSet rows = call.run(meta)) {
            List<String> listed = new ArrayList<>();
            while (rows.next()) {
                listed.add("[" + quoted(rows.getString(schemaColumn)) + ", "
                    + quoted(rows.getString(nameColumn)) + "]");
            }
            return "{\"rows\": [" + String.join(", ", listed) + "]}";
        } catch (SQLException e) {
            return error(e);
        }
    }

    static String error(SQLException e) {
        return "{\"error\": " + quoted(e.getMessage()) + ", \"sqlstate\": " + quoted(e.getSQLState()) + "}";
    }

    /** A JSON string (or null). */
    static String quoted(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
