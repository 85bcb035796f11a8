-- One database per broker instance (queue manager): each broker is its own queue manager.
CREATE DATABASE qma;
CREATE DATABASE qmb;
CREATE DATABASE qmc;
